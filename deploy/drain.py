"""Drain this box before it stops: the Kubernetes preStop hook (and usable by hand).

POST /admin/admission/drain turns /health to 503 at once, so routers stop sending new work within
a few health polls; then wait until no request is running (at most the grace period,
`LILAC_GRACE_PERIOD`) so SIGTERM finds nothing in flight. Standard library only.

    LILAC_ADMIN_KEY=... python deploy/drain.py [http://127.0.0.1:8000]
"""

from __future__ import annotations

import json
import os
import sys
import time
import urllib.request


def call(url: str, method: str, key: str) -> dict[str, object]:
    request = urllib.request.Request(url, method=method, headers={"Authorization": f"Bearer {key}"})
    with urllib.request.urlopen(request, timeout=5) as response:
        return json.loads(response.read())  # type: ignore[no-any-return]


def main() -> int:
    base = (
        sys.argv[1] if len(sys.argv) > 1 else f"http://127.0.0.1:{os.environ.get('PORT', '8000')}"
    )
    key = os.environ.get("LILAC_ADMIN_KEY", "")
    grace = float(os.environ.get("LILAC_GRACE_PERIOD", "30"))
    call(f"{base}/admin/admission/drain", "POST", key)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        status = call(f"{base}/admin/admission", "GET", key)
        if status.get("running") == 0:
            break
        time.sleep(1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
