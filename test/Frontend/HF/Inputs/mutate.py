#!/usr/bin/env python3
"""Prints a copy of a config.json with keys changed, for the bad-config tests.

usage: mutate.py BASE EDIT...
  path=JSON   set the key at the dot-separated path to the JSON value
  -path       delete the key at the path
"""
import json
import sys


def parent(root, path):
    *head, last = path.split(".")
    node = root
    for key in head:
        node = node[key]
    return node, last


def main():
    with open(sys.argv[1]) as f:
        config = json.load(f)
    for edit in sys.argv[2:]:
        if edit.startswith("-"):
            node, key = parent(config, edit[1:])
            del node[key]
        else:
            path, value = edit.split("=", 1)
            node, key = parent(config, path)
            node[key] = json.loads(value)
    json.dump(config, sys.stdout, indent=2)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
