"""The command line the golden-vector generators share: write the vectors to
their file, or, with --check FILE, regenerate them in memory and fail if FILE
differs (what the golden.* tests run)."""

import argparse
import sys
from pathlib import Path


def run(doc, generate, default_out, source="scapy"):
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--check", type=Path, help="compare with this file instead of writing")
    args = ap.parse_args()
    text = generate()
    if args.check:
        if args.check.read_text() != text:
            print(f"{args.check}: differs from what {source} generates now", file=sys.stderr)
            return 1
        print(f"{args.check}: matches {source}")
        return 0
    default_out.write_text(text)
    print(f"wrote {default_out}")
    return 0
