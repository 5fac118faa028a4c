#!/usr/bin/env python3
"""Record real slurmrestd exchanges as test fixtures (tests/fixtures/slurmrestd/<name>.json).

Why a script: the samples the tests replay must be what a real slurmrestd answered, recorded the
same way each time (the token redacted, the request and the status kept), so that anyone can
record them again on a new release. Python's standard library only.

Reads the dev cluster's environment (`eval "$(deploy/dev-cluster/dev-cluster env)"`): the URL,
the JWT key and user it mints HS256 tokens with. Each step is `NAME METHOD PATH [JSON BODY]`,
one per line on stdin; `{id}` in a path or body is the job id the last submit returned,
`{id:NAME}` the one step NAME's submit returned, `{sleep N}` alone on a line waits N seconds. The file is named `<release>_<version>_<prefix>-<NAME>.json`.

Usage: scripts/record-slurmrestd.py RELEASE VERSION PREFIX < steps
"""
import base64
import hashlib
import hmac
import json
import os
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

FIXTURES = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "slurmrestd"


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def token(key_file: str, user: str) -> str:
    key = Path(key_file).read_bytes()
    now = int(time.time())
    header = b64(json.dumps({"alg": "HS256", "typ": "JWT"}).encode())
    claims = b64(json.dumps({"iat": now, "exp": now + 600, "sun": user}).encode())
    sig = hmac.new(key, f"{header}.{claims}".encode(), hashlib.sha256).digest()
    return f"{header}.{claims}.{b64(sig)}"


def main() -> int:
    if len(sys.argv) != 4:
        print(__doc__, file=sys.stderr)
        return 2
    release, version, prefix = sys.argv[1:]
    base = os.environ["FLYTE_SLURM_RESTD_URL"].rstrip("/")
    user = os.environ["FLYTE_SLURM_USERNAME"]
    jwt = token(os.environ["FLYTE_SLURM_JWT_KEY_FILE"], user)
    job_id = None
    ids = {}  # step name -> the job id its submit returned

    def fill(text: str) -> str:
        for step, jid in ids.items():
            text = text.replace("{id:" + step + "}", str(jid))
        return text.replace("{id}", str(job_id))
    for line in sys.stdin:
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("{sleep"):
            time.sleep(float(line.split()[1].rstrip("}")))
            continue
        name, method, path, *rest = line.split(None, 3)
        body = fill(rest[0]) if rest else None
        url = f"{base}/{fill(path.lstrip('/')).replace('{v}', version)}"
        req = urllib.request.Request(url, method=method, data=body.encode() if body else None)
        req.add_header("X-SLURM-USER-NAME", user)
        req.add_header("X-SLURM-USER-TOKEN", jwt)
        if body:
            req.add_header("Content-Type", "application/json")
        t0 = time.monotonic()
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                status, ctype, raw = r.status, r.headers.get("Content-Type", ""), r.read()
        except urllib.error.HTTPError as e:
            status, ctype, raw = e.code, e.headers.get("Content-Type", ""), e.read()
        elapsed = round(time.monotonic() - t0, 3)
        try:
            resp_body = json.loads(raw)
        except ValueError:
            resp_body = raw.decode(errors="replace")
        if isinstance(resp_body, dict) and "job_id" in resp_body and path.endswith("job/submit"):
            job_id = resp_body["job_id"]
            ids[name] = job_id
        record = {
            "request": {
                "body": json.loads(body) if body else None,
                "headers": {"X-SLURM-USER-NAME": user, "X-SLURM-USER-TOKEN": "<redacted JWT>"},
                "method": method,
                "url": url,
            },
            "response": {"body": resp_body, "elapsed_s": elapsed, "headers": {"Content-Type": ctype}, "status": status},
        }
        out = FIXTURES / f"{release}_{version}_{prefix}-{name}.json"
        out.write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
        print(f"{out.name}: {status}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
