#!/usr/bin/env python3
"""Regenerate data/<version>/ from the recordings and specs in shared/ (run from the crate root):

    scripts/extract-version-data.py /work/shared

For every data_parser version the mock serves it writes
- job.json          jobs[0] of a real `GET /slurm/<v>/job/{id}` (a COMPLETED job) -- the template
                    every job record of that version is built from,
- slurmdb_job.json  jobs[0] of a real `GET /slurmdb/<v>/job/{id}` (the same job),
- job_desc_fields.json  field -> kind of `<v>_job_desc_msg` from that version's real OpenAPI spec
                    (the fields a submit accepts; anything else is warned about and ignored),
- ping.json, diag.json, partitions.json  real bodies of those endpoints where recorded
                    (tests/fixtures/<release>_<v>_{ping,diag,partitions}.json).
The release a version's recording comes from is the one the mock imitates for it by default.
"""
import json, os, sys

shared = sys.argv[1] if len(sys.argv) > 1 else "/work/shared"
samples = os.path.join(shared, "design", "slurmrestd-samples")
specs = os.path.join(shared, "openapi-upstream")
fixtures = "tests/fixtures"
VERSIONS = {
    # version: (release of the recordings, spec file)
    "v0.0.40": ("24.11", "slurm-24.11-openapi-v0.0.40.json"),
    "v0.0.41": ("24.11", "slurm-24.11-openapi-v0.0.41.json"),
    "v0.0.42": ("24.11", "slurm-24.11-openapi-v0.0.42.json"),
    "v0.0.43": ("26.05", "slurm-26.05-openapi-v0.0.43.json"),
    "v0.0.44": ("26.05", "slurm-26.05-openapi-v0.0.44.json"),
    "v0.0.45": ("26.05", "slurm-26.05-openapi-v0.0.45.json"),
    "v0.0.46": ("26.11rc1", "slurm-26.11rc1-openapi-v0.0.46.json"),
}
# Recordings of ping/diag/partitions made for the mock (tests/fixtures).
ENDPOINT_RELEASE = {"v0.0.43": "26.05", "v0.0.44": "26.05", "v0.0.45": "26.05", "v0.0.46": "26.11rc1"}


def resolve(spec, x):
    while isinstance(x, dict) and "$ref" in x:
        x = spec["components"]["schemas"][x["$ref"].split("/")[-1]]
    return x


def kind(spec, prop):
    ref = prop.get("$ref", "")
    x = resolve(spec, prop)
    t = x.get("type")
    if "no_val" in ref or (t == "object" and {"set", "infinite", "number"} <= set(x.get("properties", {}))):
        return "no_val"
    if t in ("integer", "boolean"):
        return t
    if t == "number":
        return "number"
    if t == "array":
        item = resolve(spec, x.get("items", {}))
        return "string_list" if item.get("type") == "string" and "enum" not in item else "flags"
    if t == "object":
        return "object"
    return "string"


def job_desc_fields(v, spec_file):
    spec = json.load(open(os.path.join(specs, spec_file)))
    op = spec["paths"][f"/slurm/{v}/job/submit"]["post"]
    body = resolve(spec, op["requestBody"]["content"]["application/json"]["schema"])
    job = resolve(spec, body["properties"]["job"])
    return {k: kind(spec, p) for k, p in sorted(job["properties"].items())}


def body(path):
    return json.load(open(path))["response"]["body"]


def write(path, value):
    with open(path, "w") as f:
        json.dump(value, f, indent=2, sort_keys=True)
        f.write("\n")


for v, (release, spec_file) in VERSIONS.items():
    out = os.path.join("data", v)
    os.makedirs(out, exist_ok=True)
    write(os.path.join(out, "job.json"), body(f"{samples}/{release}_{v}_job-get-one.json")["jobs"][0])
    write(os.path.join(out, "slurmdb_job.json"), body(f"{samples}/{release}_{v}_slurmdb-job-get.json")["jobs"][0])
    write(os.path.join(out, "job_desc_fields.json"), job_desc_fields(v, spec_file))
    rel = ENDPOINT_RELEASE.get(v, release)
    for case in ("ping", "diag", "partitions"):
        src = f"{fixtures}/{rel}_{v}_{case}.json"
        if os.path.exists(src):
            b = body(src)
            for k in ("meta", "errors", "warnings"):
                b.pop(k, None)
            write(os.path.join(out, f"{case}.json"), b)
    print(v, release, sorted(os.listdir(out)))
