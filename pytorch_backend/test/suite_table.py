#!/usr/bin/env python3
"""Reads verbose logs of distributed_suite.py (one a backend) and prints, as Markdown,
the counts of passes, skips, failures and errors beside each other and every test whose
outcome differs between the backends.

    suite_table.py mimatrix=/tmp/suite_mimatrix_2.log gloo=/tmp/suite_gloo_2.log
"""
import re
import sys


def outcomes(path):
    text = open(path, errors="replace").read()
    failed = set(re.findall(r"^FAIL: (test_\w+)", text, re.M))
    errored = set(re.findall(r"^ERROR: (test_\w+)", text, re.M))
    starts = [(m.start(), m.group(1)) for m in re.finditer(r"^(test_\w+) \(__main__\.", text, re.M)]
    result = {}
    for k, (at, name) in enumerate(starts):
        end = starts[k + 1][0] if k + 1 < len(starts) else len(text)
        skipped = re.search(r"skipped (?:'([^']*)'|\"([^\"]*)\")", text[at:end])
        if name in failed:
            result[name] = ("fail", "")
        elif name in errored:
            result[name] = ("error", "")
        elif skipped:
            result[name] = ("skip", skipped.group(1) or skipped.group(2))
        else:
            result[name] = ("pass", "")
    return result


def main(args):
    runs = [(a.split("=", 1)[0], outcomes(a.split("=", 1)[1])) for a in args]
    kinds = ("pass", "skip", "fail", "error")
    print("| backend | " + " | ".join(kinds) + " | tests |")
    print("|---|" + "---|" * (len(kinds) + 1))
    for name, res in runs:
        counts = [sum(1 for o, _ in res.values() if o == k) for k in kinds]
        print(f"| {name} | " + " | ".join(map(str, counts)) + f" | {len(res)} |")
    tests = sorted(set().union(*(r for _, r in runs)))
    differ = [t for t in tests if len({r.get(t, ("absent", ""))[0] for _, r in runs}) > 1]
    if differ:
        print()
        print("| test | " + " | ".join(n for n, _ in runs) + " |")
        print("|---|" + "---|" * len(runs))
        for t in differ:
            cells = []
            for _, r in runs:
                o, why = r.get(t, ("absent", ""))
                cells.append(o + (f" ({why})" if why else ""))
            print(f"| `{t}` | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main(sys.argv[1:])
