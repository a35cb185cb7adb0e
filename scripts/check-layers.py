#!/usr/bin/env python3
"""The include graph of core/ against its layers (docs/architecture.md).

core/src/<area>/ and core/include/ft/<area>/ are one layer each, ordered from
the ground up below. A file may include its own layer and the layers below
it: public headers as "ft/<area>/x.h", private ones as "<area>/x.h" or by a
name beside the file. Reported, one line each, and exit 1:
  - an include that runs up a layer (or names an area that does not exist);
  - an include of a strategy plugin's header from core;
  - a folder of core/include/ft/ without its core/src/ twin, or the other
    way round, or a public header outside an area folder.
Usage: scripts/check-layers.py [repo root]   (ctest runs it as `layers`)
"""
import os
import re
import sys

LAYERS = ["base", "io", "tokenizer", "observe", "config", "model", "data", "tasks",
          "comm", "optim", "parallel", "checkpoint", "plugin", "train"]
RANK = {a: i for i, a in enumerate(LAYERS)}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def main() -> int:
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), ".."))
    src, inc = os.path.join(root, "core", "src"), os.path.join(root, "core", "include", "ft")
    problems = []
    src_areas = {d for d in os.listdir(src) if os.path.isdir(os.path.join(src, d))}
    inc_areas = {d for d in os.listdir(inc) if os.path.isdir(os.path.join(inc, d))}
    for f in os.listdir(inc):
        if os.path.isfile(os.path.join(inc, f)):
            problems.append(f"core/include/ft/{f}: a public header outside an area folder; move it to core/include/ft/<area>/")
    for a in sorted(src_areas ^ inc_areas):
        side = "core/include/ft" if a in src_areas else "core/src"
        problems.append(f"{a}/: has no twin under {side}/; the include tree mirrors src/")
    for a in sorted((src_areas | inc_areas) - set(RANK)):
        problems.append(f"{a}/: not a layer of scripts/check-layers.py; add it to LAYERS where it belongs")
    for base, area_of in ((src, lambda rel: rel.split(os.sep)[0]), (inc, lambda rel: rel.split(os.sep)[0])):
        for dirpath, _, names in os.walk(base):
            for name in names:
                if not name.endswith((".h", ".cpp")):
                    continue
                path = os.path.join(dirpath, name)
                rel = os.path.relpath(path, base)
                area = area_of(rel)
                if area not in RANK:
                    continue
                shown = os.path.relpath(path, root)
                for target in INCLUDE.findall(open(path, encoding="utf-8").read()):
                    parts = target.split("/")
                    if parts[0] == "ft" and len(parts) >= 3:
                        to = parts[1]
                    elif len(parts) >= 2 and parts[0] in src_areas:
                        to = parts[0]
                    elif len(parts) == 1 or not os.path.exists(os.path.join(src, parts[0])):
                        # Beside the file (or a generated/system header): same layer.
                        if "strategies" in parts or target.startswith("../"):
                            problems.append(f"{shown}: includes {target}: core never includes a strategy")
                        continue
                    else:
                        continue
                    if to not in RANK:
                        problems.append(f"{shown}: includes {target}: '{to}' is not a layer")
                    elif RANK[to] > RANK[area]:
                        problems.append(f"{shown}: includes {target}: {to}/ is above {area}/ "
                                        f"(layers from the ground up: {', '.join(LAYERS)})")
    for p in problems:
        print(f"check-layers: {p}")
    if problems:
        print(f"check-layers: FAIL: {len(problems)} problem(s)")
        return 1
    print(f"check-layers: OK: {len(LAYERS)} layers, every include of core/ runs down or sideways")
    return 0


if __name__ == "__main__":
    sys.exit(main())
