#!/usr/bin/env python3
"""Prints the short story of a failed test binary's output: for each failed test, its name, the
last lines it printed before it panicked and the panic's message, without backtrace frames.
Used by tests/run.sh at the end of a run."""
import re
import sys

FRAME = re.compile(r"^\s+(\d+: |at )")
CONTEXT, MESSAGE = 6, 25


def digest(lines):
    out, section = [], None
    for line in lines:
        header = re.match(r"^---- (.+) stdout ----$", line)
        if header:
            section = {"name": header.group(1), "before": [], "panic": None}
            out.append(section)
            continue
        if section is None or FRAME.match(line):
            continue
        if section["panic"] is None:
            if "panicked at" in line:
                section["panic"] = [line]
            else:
                section["before"] = (section["before"] + [line])[-CONTEXT:]
        elif line.startswith(("stack backtrace:", "note: ")) or line.strip() == "failures:":
            section["done"] = True
        elif not section.get("done") and len(section["panic"]) < MESSAGE:
            section["panic"].append(line)
    return out


def main(path):
    with open(path, errors="replace") as f:
        lines = f.read().splitlines()
    sections = digest(lines)
    if not sections:
        # No test panicked (the binary crashed, or timed out): its last lines say why.
        print("\n".join(l for l in lines if not FRAME.match(l))[-4000:])
        return
    for s in sections:
        print(f"--- {s['name']}")
        for line in s["before"] + (s["panic"] or []):
            print(line[:600])


if __name__ == "__main__":
    main(sys.argv[1])
