#!/usr/bin/env python3
"""compare.py STOCK.xml EPQ.xml [EPQ_RETRY.xml] [--ids FILE]: counts per server from pytest's
JUnit XML, and the tests that pass on stock llama-server but not on epq serve. With a retry
report, a test that passed on epq's second try counts as passed (and is listed as such). --ids
writes the pytest ids of the tests that did not pass on epq, one a line, for that retry.
Exit 1 when there is such a test, 2 when a report is missing or ran nothing (a broken run),
else 0."""

import sys
import xml.etree.ElementTree as ET


def file_seconds(path):
    """{test file: seconds its tests took}"""
    out = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        f = case.get("classname", "").rsplit(".", 1)[-1]
        out[f] = out.get(f, 0.0) + float(case.get("time", 0) or 0)
    return out


def outcomes(path):
    """{test id: passed|failed|error|skipped}"""
    out = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        tid = case.get("classname", "") + "::" + case.get("name", "")
        kinds = {child.tag for child in case}
        if "error" in kinds:
            out[tid] = "error"
        elif "failure" in kinds:
            out[tid] = "failed"
        elif "skipped" in kinds:
            out[tid] = "skipped"
        else:
            out[tid] = "passed"
    return out


def counts(o):
    c = {k: 0 for k in ("passed", "failed", "error", "skipped")}
    for v in o.values():
        c[v] += 1
    return c


def node_id(tid):
    """unit.test_x::test_y[p] -> unit/test_x.py::test_y[p]"""
    cls, _, name = tid.partition("::")
    return cls.replace(".", "/") + ".py::" + name


def main():
    args = sys.argv[1:]
    ids_file = None
    if "--ids" in args:
        i = args.index("--ids")
        ids_file = args[i + 1]
        del args[i:i + 2]
    runs = {}
    for name, path in (("stock", args[0]), ("epq", args[1])):
        try:
            runs[name] = outcomes(path)
        except (OSError, ET.ParseError) as e:
            print(f"server suite: no report from the {name} run ({e})")
            return 2
    for name, o in runs.items():
        c = counts(o)
        print(f"server suite: {name:5s} {len(o)} tests: {c['passed']} passed, {c['failed']} failed, "
              f"{c['error']} errors, {c['skipped']} skipped")
    for name, path in (("stock", args[0]), ("epq", args[1])):
        slow = sorted(file_seconds(path).items(), key=lambda kv: -kv[1])[:5]
        print(f"server suite: {name:5s} slowest files (test time, both workers): " +
              ", ".join(f"{f} {s:.0f} s" for f, s in slow))
    stock, epq = runs["stock"], runs["epq"]
    if not any(v == "passed" for v in stock.values()):
        print("server suite: nothing passed on stock llama-server: the run is broken")
        return 2
    lost = sorted(t for t, v in stock.items() if v == "passed" and epq.get(t) != "passed")
    if ids_file:
        with open(ids_file, "w") as f:
            f.writelines(node_id(t) + "\n" for t in lost)
    if len(args) > 2:
        retry = outcomes(args[2])
        second = sorted(t for t in lost if retry.get(t) == "passed")
        if second:
            print(f"server suite: {len(second)} tests failed on epq serve and passed on a second try (flaky?):")
            for t in second:
                print(f"  {t}: {epq.get(t, 'not run')}, then passed")
        lost = [t for t in lost if t not in second]
    gained = sorted(t for t, v in epq.items() if v == "passed" and stock.get(t) != "passed")
    print(f"server suite: {len(lost)} tests pass on stock llama-server but not on epq serve" + (":" if lost else ""))
    for t in lost:
        print(f"  {t}: {epq.get(t, 'not run')}")
    if gained:
        print(f"server suite: {len(gained)} tests pass on epq serve but not on stock (random outcomes?):")
        for t in gained:
            print(f"  {t}: stock {stock.get(t, 'not run')}")
    return 1 if lost else 0


if __name__ == "__main__":
    sys.exit(main())
