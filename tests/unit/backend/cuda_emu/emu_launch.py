#!/usr/bin/env python3
"""emu_launch.py IN.cu OUT.cpp - rewrites each kernel launch `name<<<grid, block, shmem, stream>>>(args);`
into `emu_run(grid, block, [&] { name(args); });` so the CUDA backend compiles as C++ against the
emulated runtime (cuda_runtime.h in this folder). Everything else is left as it is."""
import re
import sys


def top_level_split(text):
    """Splits at the commas outside parentheses."""
    parts, depth, cur = [], 0, ""
    for ch in text:
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if ch == "," and depth == 0:
            parts.append(cur.strip())
            cur = ""
        else:
            cur += ch
    return parts + [cur.strip()]


src = open(sys.argv[1]).read()
out, pos = [], 0
for m in re.finditer(r"(\w+)<<<(.*?)>>>\(", src, re.S):
    if m.start() < pos:
        continue
    config = top_level_split(m.group(2))
    # the launch's arguments end at the parenthesis that closes the one after >>>
    depth, i = 1, m.end()
    while depth:
        depth += {"(": 1, ")": -1}.get(src[i], 0)
        i += 1
    out.append(src[pos:m.start()])
    out.append(f"emu_run(dim3({config[0]}), dim3({config[1]}), [&] {{ {m.group(1)}({src[m.end():i]}; }})")
    pos = i
out.append(src[pos:])
open(sys.argv[2], "w").write("".join(out))
