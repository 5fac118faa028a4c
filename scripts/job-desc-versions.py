#!/usr/bin/env python3
"""Prints how slurmrestd's job description (`job_desc_msg`) differs across data_parser versions.

For every property of `v0.0.NN_job_desc_msg`, and every enum value a property takes (`flags`,
`mail_type`, `shared`, `cpu_binding_flags`, `memory_binding_type`, ...), lists the versions that
have it, printing only what is not in every version, plus what each version marks deprecated.
`src/render/api_fields.rs` (which sbatch option a given version can express) is built from this
output; rerun it when a version is added and update that table.

Usage (the upstream specs are kept beside the repository; openapi/sources.txt says which file is
each version's; `the_table_matches_the_committed_specs` checks the table against the trimmed ones):
    python3 scripts/job-desc-versions.py [DIR]      # DIR defaults to ../shared/openapi-upstream
"""

import json
import os
import sys

def specs(root):
    """Which upstream file each version's committed spec is trimmed from (openapi/sources.txt),
    so this script and the client read the same upstream specs."""
    out = {}
    for line in open(os.path.join(root, "openapi/sources.txt")):
        words = line.split()
        if words and words[0].startswith("v0.0."):
            out[words[0]] = words[1]
    return out


def resolve(schemas, node, seen=()):
    """Follows `$ref`s; returns the enum values a property (or its array items) takes, or None."""
    if not isinstance(node, dict):
        return None
    if "$ref" in node:
        name = node["$ref"].rsplit("/", 1)[-1]
        if name in seen:
            return None
        return resolve(schemas, schemas[name], seen + (name,))
    for key in ("enum", "x-slurm-enum"):
        if key in node:
            return list(node[key])
    if node.get("type") == "array":
        return resolve(schemas, node.get("items", {}), seen)
    return None


def job_desc(path, version):
    spec = json.load(open(path))
    schemas = spec["components"]["schemas"]
    name = f"{version}_job_desc_msg" if f"{version}_job_desc_msg" in schemas else "job_desc_msg"
    msg = schemas[name]["properties"]
    fields, enums, deprecated = set(), {}, set()
    for name, prop in msg.items():
        fields.add(name)
        if prop.get("deprecated"):
            deprecated.add(name)
        values = resolve(schemas, prop)
        if values:
            enums[name] = set(values)
    return fields, enums, deprecated


def span(present, versions):
    """`v0.0.40, v0.0.45+` style: the versions in `present`, runs to the newest as `+`."""
    out, i = [], 0
    while i < len(versions):
        if versions[i] not in present:
            i += 1
            continue
        j = i
        while j + 1 < len(versions) and versions[j + 1] in present:
            j += 1
        if j == len(versions) - 1 and j > i:
            out.append(f"{versions[i]}+")
        elif j > i:
            out.append(f"{versions[i]}-{versions[j]}")
        else:
            out.append(versions[i])
        i = j + 1
    return ", ".join(out)


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    folder = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "../../shared/openapi-upstream")
    if not os.path.isdir(folder):
        folder = "/work/shared/openapi-upstream"
    table = specs(os.path.join(here, ".."))
    versions = list(table)
    data = {v: job_desc(os.path.join(folder, f), v) for v, f in table.items()}

    print("# job_desc_msg fields not in every version")
    all_fields = sorted(set().union(*(d[0] for d in data.values())))
    for f in all_fields:
        have = {v for v in versions if f in data[v][0]}
        if len(have) != len(versions):
            print(f"{f:32} {span(have, versions)}")

    print("\n# enum values not in every version that has the field")
    enum_fields = sorted(set().union(*(d[1].keys() for d in data.values())))
    for f in enum_fields:
        with_field = [v for v in versions if f in data[v][1]]
        values = sorted(set().union(*(data[v][1][f] for v in with_field)))
        for val in values:
            have = {v for v in with_field if val in data[v][1][f]}
            if have != set(with_field):
                print(f"{f + ' = ' + val:56} {span(have, versions)}")

    print("\n# deprecated fields")
    for f in all_fields:
        dep = {v for v in versions if f in data[v][2]}
        if dep:
            print(f"{f:32} {span(dep, versions)}")


if __name__ == "__main__":
    main()
