#!/usr/bin/env python3
"""Download model files from the Hub onto this host, the seed of a fan-out (stdlib only).

`{"model_dir", "files": [{"path", "url", "size", "sha256"}], "headers": {...}}` (arguments
arrive on stdin, so the token in headers is never in argv). Each file goes to
`<file>.glmops-partial`, which a later run continues with a Range request (a server that
ignores Range answers 200 and the file starts over); it takes its name only once its size and
sha256 match. Authorization is never forwarded on a redirect (the Hub redirects to a CDN with
signed URLs). Every path is confined to model_dir (see _envelope.confined), and a body longer
than the listed size is cut off and refused, so a hostile listing can neither write outside
model_dir nor fill the disk. Replies through the shared envelope.
"""

from __future__ import annotations

import os
import urllib.error
import urllib.request

from _envelope import Reply, UnsafePath, confined, file_sha256, main

PARTIAL = ".glmops-partial"


class FetchReply(Reply):
    """Failed when any file failed; the files that arrived are kept either way."""

    received_bytes: int  # downloaded by this run, over all files (a resume counts its rest)
    errors: list  # one "<path>: why" per file that did not arrive


class TooLong(OSError):
    """The server sent more bytes than the listing gave the file."""


def get(url, headers, partial, size):
    """Append to partial from where it ends, never past `size` bytes; returns the bytes
    received."""
    have = os.path.getsize(partial) if os.path.exists(partial) else 0
    request = urllib.request.Request(url)
    for name, value in headers.items():
        request.add_unredirected_header(name, value)  # kept off redirects to other hosts
    if have:
        request.add_header("Range", f"bytes={have}-")
    try:
        response = urllib.request.urlopen(request, timeout=60)
    except urllib.error.HTTPError as error:
        if error.code == 416:  # the partial file is already whole
            return 0
        raise
    received = 0
    resumed = response.status == 206
    room = max(0, size - (have if resumed else 0))
    with response, open(partial, "ab" if resumed else "wb") as out:
        while chunk := response.read(min(8 << 20, room + 1)):
            if len(chunk) > room:
                out.truncate(0)
                raise TooLong(
                    f"the server sent more bytes than the listing gives the file ({size})"
                )
            out.write(chunk)
            received += len(chunk)
            room -= len(chunk)
    return received


def fetch(root, entry, headers):
    final = confined(root, entry["path"])
    partial = confined(root, entry["path"] + PARTIAL)
    os.makedirs(os.path.dirname(final), exist_ok=True)
    received = 0
    for _attempt in (1, 2):
        try:
            received += get(entry["url"], headers, partial, int(entry["size"]))
        except TooLong as error:
            os.unlink(partial)
            return received, f"{entry['path']}: {error}"
        if os.path.getsize(partial) == entry["size"] and file_sha256(partial) == entry["sha256"]:
            os.replace(partial, final)
            return received, None
        os.unlink(partial)  # a wrong file is never kept under any name; start over once
    return received, f"{entry['path']}: the downloaded file does not match its sha256"


def run(args: dict) -> FetchReply:
    total, errors = 0, []
    for entry in args.get("files") or []:
        try:
            received, error = fetch(args["model_dir"], entry, args.get("headers") or {})
        except (OSError, urllib.error.URLError, UnsafePath) as exc:
            received, error = 0, f"{entry['path']}: {exc}"
        total += received
        if error:
            errors.append(error)
    return {
        "failed": bool(errors),
        "changed": total > 0,
        "msg": "; ".join(errors) if errors else f"{total} bytes downloaded",
        "received_bytes": total,
        "errors": errors,
    }


if __name__ == "__main__":
    main(run)
