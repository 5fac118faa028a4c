#!/usr/bin/env python3
"""Check, without Docker, that the build context deploy/docker/Dockerfile.dockerignore keeps is
enough for the Dockerfile's `cargo build`: copy exactly the kept files to a scratch directory, let
Cargo parse every manifest there (`cargo metadata --no-deps`: a missing target or workspace member
fails), and check that every file the sources embed (include_str!/include_bytes!) and every path
build.rs reads came along. A new top-level directory the build needs, and forgot in the ignore
file, fails here instead of in someone's `docker build`.

Supports the ignore-file subset the project uses: `*` then `!path` / `!dir/` re-inclusions.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
IGNORE = Path(__file__).with_name("Dockerfile.dockerignore")


def kept_paths() -> list[str]:
    lines = [l.strip() for l in IGNORE.read_text().splitlines()]
    lines = [l for l in lines if l and not l.startswith("#")]
    if not lines or lines[0] != "*":
        raise SystemExit(f"{IGNORE.name}: expected to start with `*` (exclude all, then re-include)")
    keep = []
    for l in lines[1:]:
        if not l.startswith("!") or any(c in l for c in "*?["):
            raise SystemExit(f"{IGNORE.name}: unsupported line {l!r} (only `!path` re-inclusions)")
        keep.append(l[1:].rstrip("/"))
    return keep


def main() -> int:
    problems: list[str] = []
    with tempfile.TemporaryDirectory(prefix="docker-context-") as tmp:
        ctx = Path(tmp)
        for rel in kept_paths():
            src = REPO / rel
            if not src.exists():
                problems.append(f"{IGNORE.name} keeps {rel}, which does not exist")
                continue
            dst = ctx / rel
            dst.parent.mkdir(parents=True, exist_ok=True)
            if src.is_dir():
                shutil.copytree(src, dst, ignore=shutil.ignore_patterns("target"))
            else:
                shutil.copy2(src, dst)
        r = subprocess.run(
            ["cargo", "metadata", "--no-deps", "--locked", "--offline", "--format-version", "1"],
            cwd=ctx, capture_output=True, text=True,
        )
        if r.returncode != 0:
            problems.append("cargo cannot read the workspace from the kept files:\n" + r.stderr.strip())
        else:
            # Cargo lists targets without checking their files exist: check the ones a release
            # build of the binary compiles (libraries, binaries, build scripts).
            for pkg in json.loads(r.stdout)["packages"]:
                for t in pkg["targets"]:
                    if set(t["kind"]) & {"lib", "bin", "custom-build"} and not Path(t["src_path"]).exists():
                        problems.append(f"{pkg['name']}: target {t['name']} ({Path(t['src_path']).relative_to(ctx)}) left out of the context")
        # Files embedded by the sources, relative to the embedding file.
        for f in ctx.rglob("*.rs"):
            for m in re.finditer(r'include_(?:str|bytes)!\(\s*"([^"]+)"', f.read_text()):
                if not (f.parent / m.group(1)).exists():
                    problems.append(f"{f.relative_to(ctx)} embeds {m.group(1)}, left out of the context")
        # Paths each build script reads (the root's and crates/*'s), relative to its own folder.
        for script in [ctx / "build.rs", *sorted(ctx.glob("crates/*/build.rs"))]:
            if not script.exists():
                continue
            for m in re.finditer(r'"((?:\.\./)*(?:openapi|proto)/?[^"{}]*)"', script.read_text()):
                if not (script.parent / m.group(1)).exists():
                    problems.append(f"{script.relative_to(ctx)} reads {m.group(1)}, left out of the context")
        size = sum(p.stat().st_size for p in ctx.rglob("*") if p.is_file())
    for p in problems:
        print("  - " + p)
    print(f"docker context: {len(kept_paths())} kept paths, {size / 1e6:.1f} MB, "
          f"{'OK' if not problems else 'BROKEN'}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
