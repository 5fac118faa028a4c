#!/usr/bin/env python3
"""Turn a full upstream slurmrestd OpenAPI spec into the trimmed spec the client is generated from.

Why a script and not a hand-edited file: the spec must be reproducible from any Slurm's
`slurmrestd --generate-openapi-spec` output, and a test (tests/it/openapi_spec.rs) fails when the
committed spec is not exactly what this script produces from the upstream file.

It keeps only the operations the connector uses (plus every schema they reference, transitively)
and applies the fixes progenitor needs (see openapi/README.md and ../shared/design/progenitor.md):
  1. `*_no_val` schemas (v0.0.40) give `set`/`infinite` defaults, one of them `0` for a boolean:
     the defaults are dropped, so these fields are optional booleans as in every later version
     (the defaults are the server's business; the client sends what it means).
  2. inline schemas whose generated Rust name clashes with a component get a distinct `title`.
  3. only `application/json` media types are kept (progenitor panics on several).
  4. `required` entries that are not properties of the object (e.g. "cpus/count") are dropped.
  5. `required` lists are dropped altogether: real error bodies omit "required" fields
     (`jobs`, `last_backfill`), slurmdbd omits `association.user`, a 511 sends `"jobs": null`.
  6. `GET /jobs/state/` is declared as returning `openapi_job_info_resp`, but really returns
     `{jobs: [{job_id: "31", state: ["COMPLETED"]}], meta, errors, warnings}`: substitute that.
  7. `nullable: true` on every object/array response field (a 511 sends `"jobs": null`).
  8. query parameters real slurmrestd only takes repeated (`jobs/state/?job_id=1&job_id=2`,
     `slurmdb jobs/?step=1&step=2`; comma lists are rejected with 400/500) are declared as
     arrays with `explode: true`, so the generated client sends one `name=value` per id.

And three that give every version's generated module the same type and method names, so the one
conversion seam (crates/slurmrestd/src/convert/) is written once and compiled against each version:
  9. enums become plain strings, their values kept beside them as `x-slurm-enum`. Releases of one
     parser add and remove values, so a typed enum turns one new job state into an undecodable
     job list; and v0.0.43+ inline the enums that v0.0.40-42 reference, which gives the generated
     types different names per version. What the connector sends is checked against `x-slurm-enum`
     by a test instead (crates/slurmrestd/src/convert/, `sent_enum_values_exist_in_every_version`).
 10. references to anything but an object (enum lists, arrays, scalars) are replaced by the schema
     they point to, so a field has one Rust type whether a version names its schema or inlines it.
 12. slurmdb's `GET jobs/` and `GET user/{name}`, and `GET jobs/state/`, keep only the query
     parameters the connector sends (`KEPT_QUERY`): the first has 34 to 41 of them depending on
     the version, and the generated positional call takes every one, so the call would differ
     per version for filters nobody sets.
 13. response schemas keep only the properties the connector reads (`KEPT_PROPERTIES`), plus the
     schemas those reach: seven generated clients with every field of a job record would
     quadruple the crate's cold build for fields nothing reads. Decoding ignores the rest (no
     schema forbids unknown fields), and the request schema (`job_desc_msg`) stays whole. A field
     the seam starts reading is one more name here.
 11. schema names and operation ids lose their version (`v0.0.42_job_info` -> `job_info`,
     `slurm_v0042_get_ping` -> `slurm_get_ping`); v0.0.40's `*_no_val` numbers are named
     `*_no_val_struct` as in every later version (the same three fields).

Usage: trim-openapi.py UPSTREAM.json VERSION > openapi/slurmrestd-VERSION.json
"""
import json
import re
import sys

# The operations the connector uses, by path suffix and method (the version is filled in).
OPERATIONS = [
    ("/slurm/{v}/ping/", "get"),
    ("/slurm/{v}/diag/", "get"),
    ("/slurm/{v}/job/submit", "post"),
    ("/slurm/{v}/job/{{job_id}}", "get"),
    ("/slurm/{v}/job/{{job_id}}", "delete"),
    # Update: releases a job submitted held (idempotency across replicas, src/service/submit/once.rs).
    ("/slurm/{v}/job/{{job_id}}", "post"),
    ("/slurm/{v}/jobs/", "get"),
    ("/slurm/{v}/jobs/state/", "get"),
    ("/slurm/{v}/partitions/", "get"),
    ("/slurmdb/{v}/job/{{job_id}}", "get"),
    ("/slurmdb/{v}/jobs/", "get"),
    # The start-up check of identity rules: each rule's Slurm user exists, is no administrator,
    # and has the rule's account (src/service/submit/identity.rs).
    ("/slurmdb/{v}/user/{{name}}", "get"),
]

# Operations only some versions have, kept where the upstream spec has them. Each version's module
# says whether it has them (crates/slurmrestd/src/convert/shapes.rs), so the seam compiles against each.
OPTIONAL_OPERATIONS = [
    # slurmctld's configuration (v0.0.45+): the limits a coalesced job array keeps to
    # (MaxArraySize, max_script_size) and whether slurmdbd keeps job comments
    # (src/service/submit/coalesce.rs).
    ("/slurm/{v}/conf", "get"),
]

# Fix 8: (path template, method, parameter) taken as repeated `name=value` pairs.
REPEATED_QUERY = [
    ("/slurm/{v}/jobs/state/", "get", "job_id"),
    ("/slurmdb/{v}/jobs/", "get", "step"),
]

# Fix 12: (path template, method) -> the query parameters kept, in this order.
KEPT_QUERY = {
    ("/slurmdb/{v}/jobs/", "get"): ["end_time", "skip_steps", "start_time", "step", "users"],
    # 24.05's v0.0.41 also declares `update_time` and `flags` here; no other version does.
    ("/slurm/{v}/jobs/state/", "get"): ["job_id"],
    # The others (`with_deleted`, `with_coords`, `with_wckeys`) are filters nobody sets.
    ("/slurmdb/{v}/user/{{name}}", "get"): ["with_assocs"],
    # `update_time` asks for the configuration only if it changed: read once, it never did.
    ("/slurm/{v}/conf", "get"): [],
}

# Fix 13: (unversioned schema name) -> the properties kept. Schemas not listed keep all of theirs.
KEPT_PROPERTIES = {
    # slurmctld's job record (GET job/{id}, jobs/)
    "job_info": [
        "job_id", "name", "job_state", "exit_code", "derived_exit_code", "state_reason",
        "state_description", "comment", "user_name", "standard_output", "standard_error",
        "current_working_directory", "partition", "submit_time", "start_time", "end_time",
        "tres_alloc_str", "nodes", "restart_cnt", "array_job_id", "array_task_id",
        "array_task_string", "time_limit", "batch_host", "memory_per_node",
    ],
    # slurmdbd's job record (GET slurmdb job/{id}, jobs/)
    "job": [
        "job_id", "name", "state", "exit_code", "derived_exit_code", "comment", "user",
        "stdout", "stdout_expanded", "stderr", "stderr_expanded", "working_directory",
        "partition", "time", "steps", "tres", "nodes", "restart_cnt", "array", "required",
    ],
    "step": ["step", "state", "exit_code", "time", "tres", "nodes"],
    "partition_info": ["name", "partition"],
    # slurmdbd's user record (GET slurmdb user/{name}); `wckeys` and `coordinators` would pull in
    # the wckey and coordinator schemas for fields nothing reads.
    "user": ["name", "administrator_level", "associations", "default"],
    # slurm.conf through GET conf (v0.0.45+), of its ~220 keys.
    "slurm_conf": [
        "MaxArraySize", "AccountingStoreFlags", "AccountingStorageType", "SchedulerParameters",
    ],
    "openapi_conf_resp": ["slurm_conf", "meta", "errors", "warnings"],
    "stats_msg": [
        "jobs_submitted", "jobs_running", "jobs_pending", "server_thread_count",
        "rpcs_by_message_type",
    ],
}

REF_PREFIX = "#/components/schemas/"


def camel(name: str) -> str:
    """The Rust type name typify derives from a schema name (close enough to detect clashes)."""
    parts = re.split(r"[^A-Za-z0-9]+", name)
    return "".join(p[:1].upper() + p[1:] for p in parts if p)


def walk(node, fn):
    """Apply fn to every dict in the tree, depth first (fn may mutate the dict in place)."""
    if isinstance(node, dict):
        fn(node)
        for value in list(node.values()):
            walk(value, fn)
    elif isinstance(node, list):
        for value in node:
            walk(value, fn)


def referenced_schemas(node, found):
    def visit(d):
        ref = d.get("$ref")
        if isinstance(ref, str) and ref.startswith(REF_PREFIX):
            found.add(ref[len(REF_PREFIX):])
    walk(node, visit)


def keep_json_only(op):
    def visit(d):
        content = d.get("content")
        if isinstance(content, dict) and "application/json" in content:
            d["content"] = {"application/json": content["application/json"]}
    walk(op, visit)


def fix_schema(schema):
    def visit(d):
        props = d.get("properties")
        if isinstance(props, dict) and {"set", "infinite", "number"} <= set(props):
            for flag in ("set", "infinite"):
                if isinstance(props[flag], dict):
                    props[flag].pop("default", None)
        if "required" in d and isinstance(d["required"], list):
            del d["required"]
    walk(schema, visit)


def nullable_fields(schema):
    """Object and array properties may be null in real bodies (a 511 sends "jobs": null)."""
    def visit(d):
        props = d.get("properties")
        if isinstance(props, dict):
            for prop in props.values():
                if isinstance(prop, dict) and prop.get("type") in ("array", "object"):
                    prop["nullable"] = True
    walk(schema, visit)


def title_clashing_inline_schemas(schemas):
    """Fix 2: an inline object/enum named <Parent><Prop> that equals a component's name."""
    component_names = {camel(n) for n in schemas}

    def visit_props(owner_name, node):
        props = node.get("properties") if isinstance(node, dict) else None
        if not isinstance(props, dict):
            return
        for prop_name, prop in props.items():
            if not isinstance(prop, dict) or "$ref" in prop:
                continue
            generated = camel(owner_name + "_" + prop_name)
            inline = prop.get("type") == "object" or "enum" in prop or "properties" in prop
            if inline and generated in component_names and "title" not in prop:
                prop["title"] = owner_name + "_" + prop_name + "_inline"
            visit_props(owner_name + "_" + prop_name, prop)
            items = prop.get("items")
            if isinstance(items, dict) and "$ref" not in items:
                visit_props(owner_name + "_" + prop_name + "_item", items)

    for name, schema in schemas.items():
        visit_props(name, schema)


def strip_enums(node):
    """Fix 9: `enum` -> plain string with the values kept in `x-slurm-enum`."""
    def visit(d):
        if "enum" in d:
            d["x-slurm-enum"] = d.pop("enum")
            d.setdefault("type", "string")
    walk(node, visit)


def inline_non_objects(paths, schemas):
    """Fix 10: inline every reference to a schema that is not an object."""
    def is_object(schema):
        return schema.get("type") == "object" or "properties" in schema

    inlined = {n for n, sch in schemas.items() if not is_object(sch)}

    def resolve(node):
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith(REF_PREFIX) and ref[len(REF_PREFIX):] in inlined:
                body = json.loads(json.dumps(schemas[ref[len(REF_PREFIX):]]))
                rest = {k: v for k, v in node.items() if k != "$ref"}
                body.update(rest)
                return resolve(body)
            return {k: resolve(v) for k, v in node.items()}
        if isinstance(node, list):
            return [resolve(v) for v in node]
        return node

    kept = {n: resolve(sch) for n, sch in schemas.items() if n not in inlined}
    return resolve(paths), kept


def unversioned(text, version):
    """Fix 11, on the serialized spec: every versioned schema name and operation id."""
    p = re.escape(version)  # "v0.0.42"
    compact = version.replace(".", "")  # "v0042"
    text = re.sub(r"\b(?:%s)_([A-Za-z0-9_]*?)_no_val\b(?!_struct)" % p, r"\1_no_val_struct", text)
    text = re.sub(r"(?<![A-Za-z0-9.])%s_" % p, "", text)
    text = re.sub(r"_%s_" % compact, "_", text)
    return text


def job_state_response(version):
    """Fix 6: what GET /jobs/state/ really returns (job_id is a string there, an int elsewhere)."""
    p = "v" + version[1:] if version.startswith("v") else version
    return {
        "type": "object",
        "description": "Response of GET jobs/state/ as served by real slurmrestd (job_id is a string).",
        "properties": {
            "jobs": {
                "type": "array",
                "nullable": True,
                "items": {
                    "type": "object",
                    "title": f"{p}_job_state_entry",
                    "properties": {
                        "job_id": {"type": "string"},
                        "state": {"type": "array", "nullable": True, "items": {"type": "string"}},
                    },
                },
            },
            "meta": {"$ref": f"{REF_PREFIX}{p}_openapi_meta"},
            "errors": {"$ref": f"{REF_PREFIX}{p}_openapi_errors"},
            "warnings": {"$ref": f"{REF_PREFIX}{p}_openapi_warnings"},
        },
    }


def trim(spec, version):
    paths = {}
    for template, method in OPERATIONS:
        path = template.format(v=version)
        try:
            op = spec["paths"][path][method]
        except KeyError:
            sys.exit(f"trim-openapi: {method.upper()} {path} is not in the upstream spec")
        paths.setdefault(path, {})[method] = json.loads(json.dumps(op))
        # Path-level parameters (e.g. job_id) travel with the path.
        if "parameters" in spec["paths"][path]:
            paths[path]["parameters"] = spec["paths"][path]["parameters"]
    for template, method in OPTIONAL_OPERATIONS:
        path = template.format(v=version)
        op = spec["paths"].get(path, {}).get(method)
        if op is not None:
            paths.setdefault(path, {})[method] = json.loads(json.dumps(op))

    schemas_in = json.loads(json.dumps(spec["components"]["schemas"]))
    for name, keep in KEPT_PROPERTIES.items():
        schema = schemas_in.get(f"{version}_{name}")
        if schema is not None and isinstance(schema.get("properties"), dict):
            schema["properties"] = {
                k: v for k, v in schema["properties"].items() if k in keep
            }
    state_path = f"/slurm/{version}/jobs/state/"
    state_name = f"{version}_openapi_job_state_resp"
    if state_name in schemas_in:
        sys.exit(f"trim-openapi: upstream already defines {state_name}; revisit fix 6")
    for code, resp in paths[state_path]["get"]["responses"].items():
        content = resp.get("content", {}).get("application/json")
        if content is not None:
            content["schema"] = {"$ref": REF_PREFIX + state_name}

    for ops in paths.values():
        for op in ops.values():
            keep_json_only(op)

    for template, method, name in REPEATED_QUERY:
        params = paths[template.format(v=version)][method]["parameters"]
        param = next((p for p in params if p["name"] == name), None)
        if param is None and (template, name) == ("/slurm/{v}/jobs/state/", "job_id"):
            # 24.05's v0.0.41 spec (the one with named schemas) omits it, though it is the point
            # of the endpoint and 24.11's v0.0.41 declares it and serves it (recorded).
            param = {"name": name, "in": "query", "style": "form", "required": False}
            params.append(param)
        if param is None:
            sys.exit(f"trim-openapi: no query parameter {name} on {method.upper()} {template}")
        param["explode"] = True
        param["description"] = param.get("description", "") + " (sent as repeated parameters)"
        param["schema"] = {"type": "array", "items": {"type": "string"}}

    for (template, method), names in KEPT_QUERY.items():
        if (template, method) in OPTIONAL_OPERATIONS and template.format(v=version) not in paths:
            continue
        op = paths[template.format(v=version)][method]
        by_name = {p["name"]: p for p in op.get("parameters", []) if p.get("in") == "query"}
        missing = [n for n in names if n not in by_name]
        if missing:
            sys.exit(f"trim-openapi: {method.upper()} {template} has no query parameter {missing}")
        others = [p for p in op.get("parameters", []) if p.get("in") != "query"]
        op["parameters"] = others + [by_name[n] for n in names]

    extra = {state_name: job_state_response(version)}
    wanted, todo = set(), set()
    referenced_schemas(paths, todo)
    referenced_schemas(extra, todo)
    todo.discard(state_name)
    while todo:
        name = todo.pop()
        if name in wanted:
            continue
        wanted.add(name)
        found = set()
        referenced_schemas(schemas_in[name], found)
        todo |= found - wanted

    schemas = {n: json.loads(json.dumps(schemas_in[n])) for n in sorted(wanted)}
    schemas.update(extra)
    for schema in schemas.values():
        fix_schema(schema)
        strip_enums(schema)
    paths, schemas = inline_non_objects(paths, schemas)
    for schema in schemas.values():
        nullable_fields(schema)
    title_clashing_inline_schemas(schemas)

    out = {
        "openapi": spec["openapi"],
        "info": spec["info"],
        "paths": paths,
        "components": {"schemas": dict(sorted(schemas.items()))},
    }
    if "security" in spec:
        out["security"] = spec["security"]
    if "securitySchemes" in spec.get("components", {}):
        out["components"]["securitySchemes"] = spec["components"]["securitySchemes"]
    return out


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__.strip().splitlines()[-1])
    with open(sys.argv[1]) as f:
        spec = json.load(f)
    version = sys.argv[2]
    text = json.dumps(trim(spec, version), indent=1, sort_keys=False)
    sys.stdout.write(unversioned(text, version))
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
