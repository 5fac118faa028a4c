#!/usr/bin/env python3
"""Flyte 1 (flyte-core): the site's `enabled-plugins` list with the plugins slurm-connector needs
added, as a values file to pass last to `helm upgrade`.

Helm merges values files map by map but replaces a list whole, so the list in
values-flyte1-core.yaml (flyte-core's default plus agent-service) would drop any plugin the site
enabled itself (spark, ray, ...). This reads the release's current values and prints the site's
own list with the missing plugins appended, in its order:

  helm get values flyte -n flyte --all -o json | python3 deploy/flyte/enabled-plugins.py agent-service > flyte-enabled-plugins.json

(`--all`: the values in effect, the chart's defaults included, so a site that never set the list
keeps the chart's.) Standard library only: Helm reads JSON values files as YAML.
"""
import json
import sys

PATH = ("configmap", "enabled_plugins", "tasks", "task-plugins", "enabled-plugins")


def merged(values: dict, add: list[str]) -> dict:
    node = values
    for key in PATH:
        node = node.get(key) if isinstance(node, dict) else None
    if node is None:
        raise SystemExit(
            "the values have no configmap.enabled_plugins.tasks.task-plugins.enabled-plugins: "
            "pass `helm get values RELEASE --all -o json` of a flyte-core release")
    if not isinstance(node, list):
        raise SystemExit(f"configmap.enabled_plugins.tasks.task-plugins.enabled-plugins is {node!r}, not a list")
    plugins = list(node) + [p for p in add if p not in node]
    out: dict = {"enabled-plugins": plugins}
    for key in reversed(PATH[:-1]):
        out = {key: out}
    return out


def main() -> int:
    add = sys.argv[1:]
    if not add:
        print(__doc__, file=sys.stderr)
        return 2
    try:
        values = json.load(sys.stdin)
    except json.JSONDecodeError as e:
        raise SystemExit(f"stdin is not JSON ({e}): pipe `helm get values RELEASE --all -o json`")
    json.dump(merged(values, add), sys.stdout, indent=2)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
