"""The split-count rule of backend/sparse_mla/ (pure Python, no GPU), pinned on the
benchmark's grid: the split counts the committed H200 benchmark ran with. Where a sweep compared
split counts at the default tile (benchmarks/results/kernel-log.md: round 1 for B=8/32/128 with 64+
heads, round 4 for B=1/8/32/128 with H=8 and B=8/128 with H=16), these were the fastest; the other
entries are regression pins of the rule's own choice."""

from __future__ import annotations

import math
from types import ModuleType

import pytest

from benchmarks.sparse_mla import overrides
from tests.support.module_file import load_sparse_mla

pytest.importorskip("triton", reason="the kernel module imports triton")
H200_SMS = 132


@pytest.fixture(scope="module")
def kmod() -> ModuleType:
    return load_sparse_mla("sparse_mla_splits")


def default_config(kmod: ModuleType, *args: object, **kwargs: object) -> dict[str, int]:
    """The plan's default tile (``_default_tile``) as the benchmark's config, the form these
    pins are written in."""
    return overrides.config_of(kmod, kmod._default_tile(*args, **kwargs))


def _gluon(cfg: dict[str, int]) -> bool:
    """Whether a config names one of the Gluon kernels."""
    return bool(cfg.get("WGMMA") or cfg.get("MMA_V2"))


# (B, H) -> split count at topk 2048 on 132 SMs (see the module docstring)
SPLITS = {
    (1, 8): 64, (1, 16): 64, (1, 64): 32, (1, 128): 32,
    (8, 8): 16, (8, 16): 16, (8, 64): 16, (8, 128): 8,
    (32, 8): 8, (32, 16): 8, (32, 64): 4, (32, 128): 2,
    (128, 8): 2, (128, 16): 2, (128, 64): 1, (128, 128): 1,
}  # fmt: skip


# The swapped small-head Gluon tile (Hopper) runs one program per SM: B=1/8/32/128 at H=8 and
# B=8/32/128 at H=16 were the fastest of the split counts that round 8's sweep compared.
SWAPPED_SPLITS = {(1, 8): 32, (1, 16): 32, (8, 8): 16, (8, 16): 16,
                  (32, 8): 4, (32, 16): 4, (128, 8): 1, (128, 16): 1}  # fmt: skip


@pytest.mark.parametrize("wgmma", [False, True])
@pytest.mark.parametrize(("batch", "heads"), sorted(SPLITS))
def test_split_rule_on_the_benchmark_grid(
    kmod: ModuleType, batch: int, heads: int, wgmma: bool
) -> None:
    """Both 64-head tiles (tl.dot, and Gluon on Hopper) take the same split counts (a pin; round
    6's sweep compared two split counts per case for the Gluon tile, and these were faster);
    at 8 and 16 heads, Hopper's swapped tile takes its own."""
    cfg = default_config(kmod, heads, wgmma=wgmma)
    head_blocks = -(-heads // cfg["BLOCK_H"])
    got = kmod._choose_splits(
        batch, head_blocks, 2048, heads, cfg["BLOCK_N"], H200_SMS, cfg["WAVES"]
    )
    swapped = wgmma and heads <= 16
    assert got == (SWAPPED_SPLITS if swapped else SPLITS)[(batch, heads)]


# The e4m3 Hopper tile (84-95 KB) runs a second program per SM only where each split keeps 8+
# tiles: round 14's sweep (benchmarks/results/kernel-log.md) had B=128 faster at 2 splits than at 1,
# B=32 not faster at 8 than at 4, and B=8 slower at 32 than at 16.
E4M3_SPLITS = {(8, 8): 16, (8, 16): 16, (32, 8): 4, (32, 16): 4, (128, 8): 2, (128, 16): 2}


@pytest.mark.parametrize(("batch", "heads"), sorted(E4M3_SPLITS))
def test_split_rule_for_the_e4m3_hopper_tile(kmod: ModuleType, batch: int, heads: int) -> None:
    cfg = default_config(kmod, heads, "fp8", wgmma=True)
    assert cfg["WGMMA"] == 1
    got = kmod._choose_splits(
        batch, 1, 2048, heads, cfg["BLOCK_N"], H200_SMS, cfg["WAVES"], cfg["MIN_TILES"]
    )
    assert got == E4M3_SPLITS[(batch, heads)]


@pytest.mark.parametrize("min_tiles", [1, 2, 8])
@pytest.mark.parametrize("batch", [1, 8, 32, 128])
def test_a_second_wave_keeps_min_tiles(kmod: ModuleType, batch: int, min_tiles: int) -> None:
    """Past one program per SM, a split keeps min_tiles 64-row tiles of topk 2048."""
    splits = kmod._choose_splits(batch, 1, 2048, 8, 64, H200_SMS, 2, min_tiles)
    one_wave = 1 << ((H200_SMS // batch).bit_length() - 1)
    assert splits <= max(one_wave, 2048 // (64 * min_tiles))
    assert splits >= min(one_wave, 2048 // 64)


# Batch sizes where powers of two leave SMs idle at one program per SM: H200 analogs of SM120's
# B=8, 32 and 128 (6, 22 and 90 of 132 SMs' tokens), and SM120's own. (B, SMs, heads, BLOCK_N,
# rounds) -> splits. Round 24's sweep (benchmarks/results/kernel-log.md) had the H200's fastest at
# 22 splits for B=6 (BLOCK_N 32), 6 for B=22, 4 for B=90 with 64 heads on the 99 KB tile (4 rounds);
# 1 for B=90 on Hopper's own tiles (one round: near the memory floor, so more rounds only add
# partials).
FILLED = {
    (6, 132, 8, 32, 1): 22, (6, 132, 8, 64, 1): 16, (22, 132, 8, 32, 1): 6,
    (22, 132, 64, 64, 1): 6, (22, 132, 64, 32, 4): 6, (90, 132, 64, 32, 4): 4,
    (90, 132, 8, 64, 1): 1, (90, 132, 64, 64, 1): 1,
    (8, 188, 16, 32, 1): 22, (32, 188, 16, 32, 1): 5, (128, 188, 16, 32, 1): 1,
    (32, 188, 64, 32, 4): 5, (128, 188, 64, 32, 4): 4,
}  # fmt: skip


@pytest.mark.parametrize("key", sorted(FILLED))
def test_one_program_per_sm_tiles_fill_the_sms(kmod: ModuleType, key: tuple) -> None:
    """Where one program per SM runs, the split count need not be a power of two: it fills the
    SMs a power of two leaves idle, never with an empty split, and within ``rounds`` rounds of
    programs per SM (the power of two's own count excepted)."""
    batch, sms, heads, block_n, rounds = key
    splits = kmod._choose_splits(batch, 1, 2048, heads, block_n, sms, 1, 1, rounds)
    assert splits == FILLED[key]
    chunk = kmod._split_chunk(2048, splits, block_n)  # what the launcher gives each split
    assert math.ceil(2048 / chunk) == splits  # every split has rows
    pow2 = kmod._choose_splits(batch, 1, 2048, heads, block_n, sms, 1, 1, 0)  # 0: no fill
    assert splits == pow2 or math.ceil(batch * splits / sms) <= rounds
    assert splits >= pow2


def test_the_plan_fills_sm120_in_rounds_only_on_the_measured_tile(
    kmod: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through the plan on SM120's 188 SMs: the 99 KB 64-head tile queues rounds of programs
    (B=128: 4 splits at 64 heads, 2 at 128); an override that reshapes it (rows or heads) is
    not the tile that was measured, so it keeps one round unless it names its own ROUNDS."""
    import torch

    monkeypatch.setattr(kmod, "_num_sms", lambda index: 188)  # RTX PRO 6000 Blackwell
    gpu = torch.device("cuda", 0)  # a device index, never queried
    sm120 = kmod.DeviceLimits((12, 0), 101376)

    def plan(heads: int, config: dict[str, int] | None) -> tuple[dict[str, int], int]:
        return overrides.plan(
            kmod, 128, heads, 2048, gpu, None, config, "16bit", False, sm120, True
        )

    assert plan(64, None) == ({**plan(64, None)[0], "ROUNDS": 4}, 4)
    assert plan(128, None)[1] == 2
    assert plan(64, {"COL_WARPS": 1, "MMA_V2": 1})[0]["ROUNDS"] == 4  # the same rows and heads
    assert plan(64, {"BLOCK_H": 64, "BLOCK_N": 32, "MMA_V2": 1})[0]["ROUNDS"] == 4
    reshaped, splits = plan(64, {"BLOCK_N": 16, "num_stages": 4, "MMA_V2": 1})
    assert "ROUNDS" not in reshaped and splits == 1
    assert plan(64, {"BLOCK_N": 16, "num_stages": 4, "MMA_V2": 1, "ROUNDS": 4})[1] == 4


def test_tiles_of_two_programs_per_sm_keep_powers_of_two(kmod: ModuleType) -> None:
    """Past one program per SM the fill is for tiles that run one: the tl.dot tiles (two per
    SM) keep the power of two at B=22 on 132 SMs (176 programs)."""
    assert kmod._choose_splits(22, 1, 2048, 8, 32, H200_SMS, 2) == 8


# Two-per-SM tiles that the partial cap (or the e4m3 Hopper tile's 8 tiles a split) leaves
# short of one program per SM on 132 SMs take one each: (B, programs per token, heads, BLOCK_N,
# min_tiles) -> splits. Round 25's sweeps (benchmarks/results/kernel-log.md) had each faster than
# the count before (in brackets): tl.dot tiles B=5/6 with 8-32 heads 22 (16; 1.07-1.15x), B=10 13
# and B=12 11 with 16 heads (8; 1.27-1.30x, 1.19x), B=17 7 and B=20 6 with 32 (4; 1.38x, 1.29x);
# Hopper's e4m3 tile B=10 11 (8; 1.08-1.11x), B=17 7 (4; 1.26-1.28x), B=22 6 (4; 1.14-1.15x);
# fp8_ds_mla's grouped tile at 32 heads (two blocks) B=3 22 (16; 1.14-1.16x), B=5 13 (8; 1.37x).
SHORT_OF_ONE_PER_SM = {
    (5, 1, 8, 32, 1): 22, (6, 1, 16, 32, 1): 22, (6, 1, 32, 32, 1): 22, (10, 1, 16, 32, 1): 13,
    (12, 1, 16, 32, 1): 11, (17, 1, 32, 32, 1): 7, (20, 1, 32, 32, 1): 6, (10, 1, 8, 64, 8): 11,
    (17, 1, 16, 64, 8): 7, (22, 1, 8, 64, 8): 6, (22, 1, 16, 64, 8): 6, (3, 2, 32, 32, 1): 22,
    (5, 2, 32, 32, 1): 13,
}  # fmt: skip


@pytest.mark.parametrize("key", sorted(SHORT_OF_ONE_PER_SM))
def test_two_per_sm_tiles_give_every_sm_one_program(kmod: ModuleType, key: tuple) -> None:
    batch, blocks, heads, block_n, min_tiles = key
    splits = kmod._choose_splits(batch, blocks, 2048, heads, block_n, H200_SMS, 2, min_tiles)
    assert splits == SHORT_OF_ONE_PER_SM[key]
    assert batch * blocks * splits <= H200_SMS  # one program per SM at most: no second wave
    chunk = kmod._split_chunk(2048, splits, block_n)
    assert math.ceil(2048 / chunk) == splits  # every split has rows


@pytest.mark.parametrize("topk", [1, 31, 32, 64, 100])
def test_a_split_keeps_at_least_one_tile(kmod: ModuleType, topk: int) -> None:
    splits = kmod._choose_splits(1, 1, topk, 8, 32, H200_SMS, 4)
    assert splits >= 1 and (splits == 1 or topk // splits >= 32)


# fp8_ds_mla rows: the fastest split counts of the fp8 sweep at the default tile
# (benchmarks/results/kernel-log.md, round 5) for H=8; B=8 picks 16 (32 measured 2 µs faster),
# B=32/H=16 is the rule's own choice.
FP8_SPLITS = {(1, 8): 64, (8, 8): 16, (32, 8): 8, (32, 16): 8, (128, 8): 2, (128, 16): 2}


@pytest.mark.parametrize(("batch", "heads"), sorted(FP8_SPLITS))
def test_split_rule_for_fp8_rows(kmod: ModuleType, batch: int, heads: int) -> None:
    cfg = default_config(kmod, heads, "fp8_ds_mla")
    assert cfg["num_stages"] == 2 and not cfg.get("PREFETCH_IDX")  # the fp8 small-head tile
    got = kmod._choose_splits(batch, 1, 2048, heads, cfg["BLOCK_N"], H200_SMS, cfg["WAVES"])
    assert got == FP8_SPLITS[(batch, heads)]


def test_the_gluon_tiles_serve_16_bit_rows_at_up_to_16_or_33_plus_heads(kmod: ModuleType) -> None:
    """64-head blocks (33+ heads, padded) and the swapped tile's 8 or 16 heads, for 16-bit and
    e4m3 rows; 17-32 heads and GPUs without warpgroup MMA take the tl.dot tiles (fp8_ds_mla
    rows: the next test)."""
    assert default_config(kmod, 64, wgmma=True).get("WGMMA") == 1
    assert default_config(kmod, 128, wgmma=True).get("WGMMA") == 1
    assert default_config(kmod, 33, wgmma=True).get("WGMMA") == 1  # padded to 64 rows
    assert not default_config(kmod, 32, wgmma=True).get("WGMMA")
    for heads, block_h in ((1, 8), (8, 8), (9, 16), (16, 16)):
        cfg = default_config(kmod, heads, wgmma=True)
        assert cfg["WGMMA"] == 1 and cfg["BLOCK_H"] == block_h and cfg["num_warps"] == 4
    assert not default_config(kmod, 8, "fp8_ds_mla", wgmma=True).get("WGMMA")  # mma.sync
    for heads in (33, 64, 128):  # e4m3 rows: two warpgroups of 32 heads
        cfg = default_config(kmod, heads, "fp8", wgmma=True)
        assert cfg["WGMMA"] == 1 and cfg["BLOCK_H"] == 64 and cfg["num_warps"] == 8
    assert not default_config(kmod, 32, "fp8", wgmma=True).get("WGMMA")
    assert not default_config(kmod, 64, wgmma=False).get("WGMMA")
    assert not default_config(kmod, 16, wgmma=False).get("WGMMA")


def test_fp8_ds_mla_rows_take_the_e4m3_mma_tile_with_up_to_16_heads(kmod: ModuleType) -> None:
    """fp8_ds_mla rows: the e4m3 mma.sync tile (``DS``) with up to 16 heads wherever the
    mma.sync tiles or Hopper's run: 8 heads on 4 warps (two per SM on Hopper, one on a 99 KB
    GPU), 9-16 on 8 warps one per SM (on a 99 KB GPU with q's rope part in registers); more
    heads, the grouped tl.dot kernel."""
    sm120 = kmod.DeviceLimits((12, 0), 101376)
    for heads, block_h, warps, waves in ((1, 8, 4, 2), (8, 8, 4, 2), (9, 16, 8, 1), (16, 16, 8, 1)):
        tile = kmod._default_tile(heads, "fp8_ds_mla", wgmma=True)
        assert tile == kmod.MmaE4m3Tile(block_h, 64, warps, 2, waves)
        tile = kmod._default_tile(heads, "fp8_ds_mla", limits=sm120, gluon_mma=True)
        assert tile == kmod.MmaE4m3Tile(block_h, 64, warps, 2, 1, rope_regs=heads > 8)
    for heads in (17, 32, 64):
        cfg = default_config(kmod, heads, "fp8_ds_mla", limits=sm120, gluon_mma=True)
        assert cfg.get("FP8_GROUPS") == 1 and not _gluon(cfg)
        assert not _gluon(default_config(kmod, heads, "fp8_ds_mla", wgmma=True))
    assert not _gluon(default_config(kmod, 8, "fp8_ds_mla"))  # no Gluon tiles


def test_a_16_head_fp8_ds_mla_override_keeps_q_rope_in_registers_where_needed(
    kmod: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An override that asks for the 16-head e4m3 mma.sync tile over fp8_ds_mla rows gets q's
    rope part in registers on a GPU whose blocks cannot hold the shared-memory form (it would
    fail at launch there), unless it says otherwise; an 8-head override of a 16-head default
    drops it; nothing else is touched. Through the plan, then the rule itself."""
    import torch

    monkeypatch.setattr(kmod, "_num_sms", lambda index: 188)  # RTX PRO 6000 Blackwell
    gpu = torch.device("cuda", 0)  # a device index, never queried
    sm120 = kmod.DeviceLimits((12, 0), 101376)

    def plan(tokens: int, heads: int, config: dict[str, int] | None) -> dict[str, int]:
        args = (tokens, heads, 2048, gpu, 2, config, "fp8_ds_mla", False, sm120, True)
        return overrides.plan(kmod, *args)[0]

    mma16 = {"BLOCK_H": 16, "BLOCK_N": 64, "num_warps": 8, "num_stages": 2, "MMA_V2": 1}
    assert plan(8, 16, None)["ROPE_REGS"] == 1  # the plan's own 16-head tile
    assert plan(8, 8, mma16)["ROPE_REGS"] == 1  # an override of the 8-head default
    assert plan(1, 8, mma16)["ROPE_REGS"] == 1  # one token: the tl.dot default under it
    assert not plan(8, 16, {**mma16, "ROPE_REGS": 0}).get("ROPE_REGS")
    assert "ROPE_REGS" not in plan(8, 16, {**mma16, "BLOCK_H": 8, "num_warps": 4})
    rule = kmod._rope_in_registers
    assert rule("fp8_ds_mla", 16, sm120)
    assert not rule("fp8_ds_mla", 16, kmod.H200_LIMITS)  # 227 KB hold it
    assert not rule("fp8_ds_mla", 8, sm120)
    assert not rule("fp8", 16, sm120)  # e4m3 rows: no rope buffer to save
    tl_dot = kmod._default_tile(16, "fp8_ds_mla", limits=sm120)
    assert not hasattr(tl_dot, "rope_regs")


def test_fits_cp_async_needs_aligned_buffers_and_strides(kmod: ModuleType) -> None:
    import torch

    rows = torch.zeros(8, 640, dtype=torch.bfloat16)
    assert kmod._fits_cp_async(rows[:, :576])  # stride 640 elements
    assert kmod._fits_cp_async(rows[2:, :576])  # starts two whole rows further
    odd = torch.zeros(8, 577, dtype=torch.bfloat16)
    assert not kmod._fits_cp_async(odd[:, :576])  # stride 577
    # 584 elements is 1168 bytes, a multiple of 16, but Triton proves alignment only from
    # strides divisible by 16 elements: such rows failed to compile for the Gluon kernel.
    assert not kmod._fits_cp_async(torch.zeros(8, 584, dtype=torch.bfloat16)[:, :576])
    flat = torch.zeros(8 * 576 + 1, dtype=torch.bfloat16)
    assert not kmod._fits_cp_async(flat[1:].view(8, 576))  # starts 2 bytes in
    q = torch.zeros(2, 3, 584, dtype=torch.bfloat16)
    assert not kmod._fits_cp_async(rows[:, :576], q[..., :576])  # head stride 584
    assert kmod._fits_cp_async(rows[:, :576], torch.zeros(2, 3, 576, dtype=torch.bfloat16))


def test_a_tile_override_without_wgmma_means_the_tl_dot_kernel(kmod: ModuleType) -> None:
    """Tuning configs name their tile; unless they also ask for WGMMA they run the tl.dot
    kernel they were written for. Overrides that leave the tile alone keep the default."""
    import torch

    cpu = torch.device("cpu")  # no device query: wgmma, limits and the split count are given
    h200 = kmod.H200_LIMITS

    def plan(config: dict[str, int] | None) -> dict[str, int]:
        return overrides.plan(
            kmod, 4, 64, 2048, cpu, 2, config, wgmma=True, limits=h200, gluon_mma=False
        )[0]

    assert plan(None).get("WGMMA") == 1
    assert plan({"PDL": 0}).get("WGMMA") == 1
    assert not plan({"BLOCK_N": 32}).get("WGMMA")
    assert not plan({"DV_SPLIT": 2}).get("WGMMA")
    assert plan({"BLOCK_N": 32, "WGMMA": 1}) == {**plan(None), "BLOCK_N": 32}
    # At 8 heads the default is the swapped Gluon tile; an override of its stages alone means
    # the 16-head tl.dot tile with those stages, not a tl.dot kernel in the swapped tile's shape.
    small = overrides.plan(kmod, 4, 8, 2048, cpu, 2, {"num_stages": 2}, "16bit", True, h200, False)[
        0
    ]
    assert small == {**default_config(kmod, 8, wgmma=False), "num_stages": 2}
    assert (
        overrides.plan(kmod, 4, 8, 2048, cpu, 2, None, wgmma=True, limits=h200, gluon_mma=False)[0][
            "BLOCK_H"
        ]
        == 8
    )


def test_the_e4m3_mma_tile_is_sm89_and_sm120s_pick(
    kmod: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where the Gluon e4m3 tile with mma.sync may run (SM89, SM120 under Triton 3.6), the plan
    takes it for fp8 e4m3 rows with up to 16 heads, one program per SM (84-94 KB of a 99 KB
    block), unless too few 64-row tiles fill the GPU; other row formats and head counts keep
    their tiles, and a tl.dot tuning override still means the tl.dot kernel."""
    import torch

    monkeypatch.setattr(kmod, "_num_sms", lambda index: 188)  # RTX PRO 6000 Blackwell
    gpu = torch.device("cuda", 0)  # a device index, never queried
    sm120 = kmod.DeviceLimits((12, 0), 101376)
    for heads, block_h in [(1, 8), (8, 8), (9, 16), (16, 16)]:
        cfg = default_config(kmod, heads, "fp8", limits=sm120, gluon_mma=True)
        assert cfg["MMA_V2"] == 1 and cfg["BLOCK_H"] == block_h and cfg["WAVES"] == 1
        assert cfg["num_warps"] == block_h // 2  # groups of 4 warps, 8 heads each
        assert not default_config(kmod, heads, "fp8", limits=sm120).get("MMA_V2")
    wide = default_config(kmod, 32, "fp8", limits=sm120, gluon_mma=True)
    assert wide["MMA_V2"] == 1 and wide["BLOCK_H"] == 32  # the tile with q in registers

    def plan(tokens: int, config: dict[str, int] | None) -> dict[str, int]:
        return overrides.plan(kmod, tokens, 8, 2048, gpu, 2, config, "fp8", False, sm120, True)[0]

    planned = plan(8, None)  # 256 tiles of 64 rows for 188 SMs
    assert planned.get("MMA_V2") == 1
    assert not _gluon(plan(4, None))  # 128 tiles: the tl.dot tile's 32-row tiles
    assert not _gluon(plan(8, {"num_stages": 2}))
    assert plan(8, {**planned, "num_stages": 3}) == {**planned, "num_stages": 3}
    assert kmod._gluon_mma_usable((12, 0)) == kmod._gluon_mma_usable((8, 6))
    assert not kmod._gluon_mma_usable((9, 0)) and not kmod._gluon_mma_usable((10, 0), proxy=True)


def test_sixty_four_head_blocks_on_mma_sync(kmod: ModuleType) -> None:
    """16-bit (and on SM89+, fp8 e4m3) rows with 33+ heads: where no 64-head tl.dot tile fits
    (99 KB: SM86/89, SM120), the plan takes the 64-head mma.sync tile (78 KB, one program per
    SM) instead of 32-head tl.dot blocks, with Triton 3.6's Gluon; SM80's 163 KB keep the
    64-head tl.dot tile."""
    for capability in ((12, 0), (8, 6), (8, 9)):
        small = kmod.DeviceLimits(capability, 101376)
        for heads in (33, 64, 128):
            tile = kmod._default_tile(heads, "16bit", limits=small, gluon_mma=True)
            assert tile == kmod.MmaWideTile(64, 32, 8, 2, rounds=4, col_warps=2)
            assert default_config(kmod, heads, "16bit", limits=small)["BLOCK_H"] == 32
        if capability >= (8, 9):  # fp8 e4m3 rows: q's two parts fill 128 rows of stages
            cfg = default_config(kmod, 64, "fp8", limits=small, gluon_mma=True)
            assert cfg["MMA_V2"] == 1 and cfg["BLOCK_H"] == 64 and cfg["num_stages"] == 4
    a100 = kmod.DeviceLimits((8, 0), 166912)
    wide = default_config(kmod, 64, "16bit", limits=a100, gluon_mma=True)
    assert not wide.get("MMA_V2") and wide["BLOCK_H"] == 64


def test_up_to_32_heads_over_16bit_rows_on_mma_sync(kmod: ModuleType) -> None:
    """16-bit rows with up to 32 heads: where the mma.sync tiles may run (SM80-89, SM120), the
    plan takes the 16- or 32-head tile with q in registers (4 or 8 warps, one program per
    SM) instead of the tl.dot tiles; Hopper takes the 32-head one for 17-32 heads and keeps
    its swapped tile for up to 16; e4m3 rows take the 32-head one for 17-32 heads; without
    Gluon (or on SM100) the tl.dot tiles stay."""
    for capability, smem in (((12, 0), 101376), ((8, 6), 101376), ((8, 0), 166912)):
        limits = kmod.DeviceLimits(capability, smem)
        for heads, block_h in ((1, 16), (8, 16), (16, 16), (17, 32), (32, 32)):
            tile = kmod._default_tile(heads, "16bit", limits=limits, gluon_mma=True)
            assert tile == kmod.MmaTile(block_h, 32, block_h // 4, 2, col_warps=2)
            assert not default_config(kmod, heads, "16bit", limits=limits).get("MMA_V2")
    for heads, kernel in ((8, "WGMMA"), (16, "WGMMA"), (24, "MMA_V2"), (32, "MMA_V2")):
        assert default_config(kmod, heads, "16bit", wgmma=True).get(kernel) == 1
        assert default_config(kmod, heads, "fp8", wgmma=True).get(kernel) == 1
    sm89 = kmod.DeviceLimits((8, 9), 101376)
    for heads in (17, 32):  # e4m3 rows with 17-32 heads: 8 warps, 2 stages
        tile = kmod._default_tile(heads, "fp8", limits=sm89, gluon_mma=True)
        assert tile == kmod.MmaTile(32, 32, 8, 2)
    sm100 = kmod.DeviceLimits((10, 0), 232448)
    assert not _gluon(default_config(kmod, 24, "16bit", limits=sm100))


def test_column_groups_of_the_mma_sync_scores(kmod: ModuleType) -> None:
    """The scores of the 16-bit mma.sync tiles split into groups of columns only where each
    group has a warp per 8 x COL_WARPS heads and 16 rows per warp along the keys; e4m3 rows
    (q's two parts in registers) keep one group."""
    tile = {"BLOCK_N": 32, "num_stages": 2, "WAVES": 1, "MMA_V2": 1}
    fits = [
        ({"BLOCK_H": 16, "num_warps": 4}, (1, 2)),
        ({"BLOCK_H": 32, "num_warps": 8}, (1, 2, 4)),
        ({"BLOCK_H": 32, "num_warps": 4}, (1, 2, 4)),
        ({"BLOCK_H": 64, "num_warps": 8}, (1, 2, 4)),
        ({"BLOCK_H": 64, "num_warps": 8, "BLOCK_N": 16}, (1, 2, 4)),
    ]
    for shape, groups in fits:
        for g in (1, 2, 3, 4, 8):
            mma = overrides.tile_of(kmod, {**tile, **shape, "COL_WARPS": g}, "16bit")
            assert mma.column_groups_fit("16bit") == (g in groups), mma
            assert mma.column_groups_fit("fp8") == (g == 1), mma
    # 32 heads on 8 warps in two groups: two warps along the keys need 32 rows.
    assert not kmod.MmaTile(32, 16, 8, 2, col_warps=2).column_groups_fit("16bit")


def test_the_plan_keeps_column_groups_where_the_tile_takes_them(
    kmod: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through the plan on a 99 KB GPU: the default's two groups of columns go where an
    override changes the tile under them (rows that break the rule, a scratch past the shared
    memory); an override's own groups past the shared memory, or on a tile of another kernel,
    are refused."""
    import torch

    monkeypatch.setattr(kmod, "_num_sms", lambda index: 188)  # RTX PRO 6000 Blackwell
    gpu = torch.device("cuda", 0)  # a device index, never queried
    sm120 = kmod.DeviceLimits((12, 0), 101376)

    def plan(heads: int, config: dict[str, int] | None) -> dict[str, int]:
        return overrides.plan(kmod, 8, heads, 2048, gpu, 2, config, "16bit", False, sm120, True)[0]

    assert plan(64, None)["COL_WARPS"] == 2  # 96,512 bytes compiled for sm_120
    assert plan(16, None)["COL_WARPS"] == 2
    # 64-row tiles at one stage: 82 KB with one group, 119 KB with two.
    assert "COL_WARPS" not in plan(64, {"MMA_V2": 1, "BLOCK_N": 64, "num_stages": 1})
    # 16-row tiles on 4 warps, two of them along the keys: one group only.
    assert "COL_WARPS" not in plan(16, {"MMA_V2": 1, "BLOCK_N": 16, "num_stages": 4})
    short_four = {"MMA_V2": 1, "BLOCK_N": 16, "num_stages": 4, "COL_WARPS": 4}  # 94 KB
    assert plan(64, short_four)["COL_WARPS"] == 4
    with pytest.raises(ValueError, match="needs 114944 bytes of shared memory"):
        plan(64, {"MMA_V2": 1, "COL_WARPS": 4})
    with pytest.raises(ValueError, match="only the mma.sync tiles with q in registers"):
        plan(16, {"BLOCK_H": 16, "BLOCK_N": 32, "num_warps": 4, "num_stages": 3, "COL_WARPS": 2})


# (token x head rows, padded splits, partial element size) -> (V columns, warps) on 132 SMs.
MERGE_SHAPES = {
    (64, 16, 2): (64, 1),  # B=8/H=8, 16-bit partials: 512 programs, not 64 whole rows
    (256, 4, 2): (256, 1),  # B=32/H=8: 512 programs
    (8, 32, 2): (64, 1),  # B=1/H=8: as narrow as it goes
    (512, 16, 2): (512, 2),  # B=8/H=64: whole rows already make 512 programs
    (128, 8, 4): (128, 1),  # 8 splits of fp32 partials (tl.dot tile): 512 programs
    (8, 64, 4): (64, 1),  # B=1/H=8 at 64 splits: 8192 values per program at most
}


@pytest.mark.parametrize(("key", "shape"), sorted(MERGE_SHAPES.items()))
def test_merge_shape(kmod: ModuleType, key: tuple[int, int, int], shape: tuple[int, int]) -> None:
    rows, block_s, elem_size = key
    block_dv = kmod._merge_columns(rows, block_s, H200_SMS)
    assert (block_dv, kmod._merge_warps(block_dv, elem_size)) == shape
    assert block_s * block_dv <= 8192 or block_dv == 64


@pytest.mark.parametrize("elem_size", [2, 4])
@pytest.mark.parametrize("block_dv", [64, 128, 256, 512])
def test_merge_warps_never_split_a_column_chunk(
    kmod: ModuleType, block_dv: int, elem_size: int
) -> None:
    """A warp's 32 lanes take 16-byte pieces side by side; the chunk's columns fill every warp
    but the first, so no two warps hold the same columns (whose splits they would then sum
    through shared memory)."""
    warps = kmod._merge_warps(block_dv, elem_size)
    warp_cols = 32 * 16 // elem_size
    assert 1 <= warps <= 4 and (warps == 1 or warps * warp_cols <= block_dv)


# A 99 KB GPU (SM120, SM86/89) holds one program of every tile per SM, where the H200 holds
# two of the tl.dot tiles: their split counts aim for one program per SM there and then fill
# the SMs. (rows, B, H) -> the split count for SM120's tiles under Triton 3.5 (tl.dot tiles) on
# the H200's 132 SMs. Round 25's sweeps (benchmarks/results/kernel-log.md) ran these counts on the
# H200 with its programs held to one per SM, and each was the fastest of those compared: B=22 6
# splits (1.36-1.38x over the 8 that two per SM made), B=90 1 (1.07-1.10x over 2), B=6 22
# (1.12-1.13x over 16), 64 heads as two 32-head blocks B=22 3 (1.41x over 4), B=32 2 (1.05x over 4),
# 128 heads as four, B=32 1 (1.04x over 2); e4m3 rows B=22 6 (1.39-1.42x over 8), B=90 1;
# fp8_ds_mla's grouped tiles, which queue up to 4 rounds: 8 heads B=90 4 (1.23x over 1), B=22
# 6, 64 heads B=90 4 (1.13-1.15x over 1), B=22 6, 128 heads B=90 2 (1.23x over 1), B=22 3; 32
# heads (two 16-head blocks) B=22 3 (1.40x over 4), B=90 2 (1.27x over 1). B=8 and B=128 with
# 64 heads pin the rule's own choice (not swept).
HELD_ONE_PER_SM = {
    ("16bit", 22, 8): 6, ("16bit", 22, 16): 6, ("16bit", 22, 32): 6, ("16bit", 90, 8): 1,
    ("16bit", 90, 16): 1, ("16bit", 90, 32): 1, ("16bit", 6, 8): 22, ("16bit", 6, 16): 22,
    ("16bit", 22, 64): 3, ("16bit", 32, 64): 2, ("16bit", 8, 64): 8, ("16bit", 128, 64): 1,
    ("16bit", 32, 128): 1, ("fp8", 22, 8): 6, ("fp8", 90, 8): 1, ("fp8_ds_mla", 90, 8): 4,
    ("fp8_ds_mla", 22, 8): 6, ("fp8_ds_mla", 90, 64): 4, ("fp8_ds_mla", 22, 64): 6,
    ("fp8_ds_mla", 90, 128): 2, ("fp8_ds_mla", 22, 128): 3, ("fp8_ds_mla", 22, 32): 3,
    ("fp8_ds_mla", 90, 32): 2,
}  # fmt: skip
# The head block each runs: 32-head blocks for 33+ heads of 16-bit and e4m3 rows (no 64-head
# tl.dot tile fits 99 KB), the grouped 16- or 64-head tiles for fp8_ds_mla rows.
HELD_BLOCK_H = {"16bit": (16, 32, 32), "fp8": (16, 32, 32), "fp8_ds_mla": (16, 16, 64)}


@pytest.mark.parametrize("key", sorted(HELD_ONE_PER_SM))
def test_99_kb_gpus_split_for_one_program_per_sm(
    kmod: ModuleType, monkeypatch: pytest.MonkeyPatch, key: tuple[str, int, int]
) -> None:
    import torch

    kv_format, batch, heads = key
    monkeypatch.setattr(kmod, "_num_sms", lambda index: H200_SMS)
    sm120 = kmod.DeviceLimits((12, 0), 101376)
    cfg, splits = overrides.plan(
        kmod,
        batch,
        heads,
        2048,
        torch.device("cuda", 0),
        None,
        None,
        kv_format,
        False,
        sm120,
        False,
    )
    assert cfg["WAVES"] == 1 and "MMA_V2" not in cfg  # a tl.dot tile, one per SM
    small, mid, wide = HELD_BLOCK_H[kv_format]
    assert cfg["BLOCK_H"] == (small if heads <= 16 else mid if heads <= 32 else wide)
    assert splits == HELD_ONE_PER_SM[key]


# Programs an SM holds by shared memory: (capability, opt-in bytes per block, tile bytes).
BLOCKS_PER_SM = {
    ((9, 0), 232448, 93184): 2, ((10, 0), 232448, 93184): 2, ((12, 0), 101376, 93184): 1,
    ((12, 0), 101376, 73856): 1, ((8, 6), 101376, 75904): 1, ((8, 0), 166912, 93184): 1,
    ((8, 0), 166912, 75904): 2, ((12, 0), 101376, 50176): 2, ((12, 0), 101376, 50177): 1,
}  # fmt: skip


@pytest.mark.parametrize("key", sorted(BLOCKS_PER_SM))
def test_blocks_per_sm_count_the_reserved_kilobyte(kmod: ModuleType, key: tuple) -> None:
    """An SM's shared memory is the block opt-in plus the 1 KB CUDA reserves per block
    (SM80-SM120), and every resident block takes its own KB: SM120's 102,400 bytes hold two
    blocks of 50,176, not of 50,177."""
    capability, per_block, tile = key
    limits = kmod.DeviceLimits(capability, per_block)
    assert kmod._blocks_per_sm(tile, limits) == BLOCKS_PER_SM[key]


def test_tl_dot_tiles_aim_for_the_programs_an_sm_holds(kmod: ModuleType) -> None:
    """The 16- and 32-head tl.dot tiles run two per SM on Hopper; a 99 KB GPU holds one of each,
    an A100 one of the 93 KB 16-head tile and two of the 76 KB 32-head one."""
    devices = {
        "h200": (kmod.H200_LIMITS, 2, 2),
        "sm120": (kmod.DeviceLimits((12, 0), 101376), 1, 1),
        "sm86": (kmod.DeviceLimits((8, 6), 101376), 1, 1),
        "a100": (kmod.DeviceLimits((8, 0), 166912), 1, 2),
    }
    for limits, waves_16, waves_32 in devices.values():
        assert default_config(kmod, 16, limits=limits)["WAVES"] == waves_16
        assert default_config(kmod, 32, limits=limits)["WAVES"] == waves_32


def test_where_the_gluon_kernels_let_the_merge_launch(
    kmod: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After the main loop for 8/16-head blocks and for grids that leave half the SMs idle, at
    exit for wider blocks at about one program per SM (the H200's sweeps, DESIGN.md "The merge and
    its launch"); the benchmark's PDL_LATE overrides that; PDL itself needs SM90+ and a split, and a
    config may turn it off."""
    monkeypatch.setattr(kmod, "_num_sms", lambda index: 132)
    monkeypatch.setattr(kmod, "_has_pdl", lambda index: True)
    heads_16, heads_32 = kmod.WgmmaSwappedTile(16, 64, 4, 2), kmod.MmaTile(32, 32, 8, 2)
    heads_64, heads_8 = kmod.WgmmaTile(64, 64, 8, 2), kmod.WgmmaSwappedTile(8, 64, 4, 2)
    assert kmod._late_trigger(heads_16, 1000, 0)
    assert kmod._late_trigger(heads_64, 66, 0)
    assert not kmod._late_trigger(heads_64, 67, 0)
    assert not kmod._late_trigger(heads_32, 128, 0)
    with overrides.applied(kmod, {"BLOCK_H": 64, "PDL_LATE": 1}) as cfg:
        assert cfg == {"BLOCK_H": 64} and kmod._late_trigger(heads_64, 128, 0)
    with overrides.applied(kmod, {"BLOCK_H": 8, "PDL_LATE": 0}) as cfg:
        assert not kmod._late_trigger(heads_8, 8, 0)
    assert kmod._late_trigger(heads_8, 8, 0)  # restored
    assert kmod._early_merge(True, 0)
    with overrides.applied(kmod, {"BLOCK_H": 64, "PDL": 0}) as cfg:
        assert cfg == {"BLOCK_H": 64} and not kmod._early_merge(True, 0)
    with overrides.applied(kmod, {"PDL": 1}):
        assert kmod._early_merge(True, 0) and not kmod._early_merge(False, 0)
    assert kmod._early_merge(True, 0)  # restored
    assert not kmod._early_merge(False, 0)
    monkeypatch.setattr(kmod, "_has_pdl", lambda index: False)
    assert not kmod._early_merge(True, 0)
    with overrides.applied(kmod, {"PDL": 1}):
        assert not kmod._early_merge(True, 0)  # PDL needs SM90+
