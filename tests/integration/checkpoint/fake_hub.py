"""A TEST DOUBLE of the Hugging Face Hub: the subset of its HTTP API that
``huggingface_hub.HfApi.create_commit`` uses, served on 127.0.0.1 (no network is reachable here).

Endpoints (as the real Hub answers them, minimally):

* ``POST /api/models/{repo}/preupload/{rev}``: ``*.safetensors`` go through LFS, the rest inline;
* ``POST /{repo}.git/info/lfs/objects/batch``: one "basic" upload action per object, pointing
  back at this server;
* ``PUT /lfs/{oid}``: stores an LFS object, refusing content whose SHA-256 is not ``oid``;
* ``POST /api/models/{repo}/commit/{rev}``: the NDJSON commit (header, inline files, LFS
  pointers); records it and answers ``{commitUrl, commitOid}``.

It checks the bearer token. ``stall_commits`` makes the commit endpoint hang (to test clean
cancellation of an upload: no commit may be recorded). Only ``repo_type=model`` is served.
Uploads through the newer Xet protocol are not spoken: tests disable it (``HF_HUB_DISABLE_XET``),
so huggingface_hub takes its LFS path.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Commit:
    repo: str
    revision: str
    message: str
    oid: str
    files: dict[str, bytes]


@dataclass
class HubState:
    token: str
    lfs: dict[str, bytes] = field(default_factory=dict)
    commits: list[Commit] = field(default_factory=list)
    stall_commits: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)


class FakeHub:
    def __init__(self, token: str = "hf_test_token") -> None:
        self.state = HubState(token)
        state = self.state

        class Handler(_Handler):
            hub = state

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        Handler.base = self.url
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> FakeHub:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.state.stall_commits = False
        self.server.shutdown()
        self.server.server_close()


class _Handler(BaseHTTPRequestHandler):
    hub: HubState
    base: str

    def log_message(self, format: str, *args: object) -> None:
        pass

    def _reply(self, code: int, body: object) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _body(self) -> bytes:
        return self.rfile.read(int(self.headers.get("Content-Length", "0")))

    def _authorized(self) -> bool:
        if self.headers.get("Authorization") != f"Bearer {self.hub.token}":
            self._reply(401, {"error": "Invalid credentials"})
            return False
        return True

    def do_POST(self) -> None:
        body = self._body()
        if not self._authorized():
            return
        if m := re.fullmatch(r"/api/models/(.+)/preupload/([^/?]+)", self.path):
            files = json.loads(body)["files"]
            modes = [
                {
                    "path": f["path"],
                    "uploadMode": "lfs" if f["path"].endswith(".safetensors") else "regular",
                    "shouldIgnore": False,
                }
                for f in files
            ]
            self._reply(200, {"files": modes, "commitOid": "0" * 40})
        elif m := re.fullmatch(r"/(.+)\.git/info/lfs/objects/batch", self.path):
            objects = json.loads(body)["objects"]
            out = [
                {
                    "oid": o["oid"],
                    "size": o["size"],
                    "actions": {"upload": {"href": f"{self.base}/lfs/{o['oid']}"}},
                }
                for o in objects
            ]
            self._reply(200, {"transfer": "basic", "objects": out})
        elif m := re.fullmatch(r"/api/models/(.+)/commit/([^/?]+)(\?.*)?", self.path):
            while self.hub.stall_commits:
                time.sleep(0.05)
            self._commit(m.group(1), m.group(2), body)
        else:
            self._reply(404, {"error": f"no route for POST {self.path}"})

    def _commit(self, repo: str, revision: str, body: bytes) -> None:
        message, files = "", {}
        for line in body.splitlines():
            item = json.loads(line)
            value = item["value"]
            if item["key"] == "header":
                message = value["summary"]
            elif item["key"] == "file":
                files[value["path"]] = base64.b64decode(value["content"])
            elif item["key"] == "lfsFile":
                data = self.hub.lfs.get(value["oid"])
                if data is None:
                    self._reply(400, {"error": f"LFS object {value['oid']} was never uploaded"})
                    return
                files[value["path"]] = data
        oid = hashlib.sha1(body).hexdigest()
        with self.hub.lock:
            self.hub.commits.append(Commit(repo, revision, message, oid, files))
        url = f"{self.base}/{repo}/commit/{oid}"
        self._reply(200, {"commitUrl": url, "commitOid": oid, "pullRequestUrl": None})

    def do_PUT(self) -> None:
        body = self._body()
        if m := re.fullmatch(r"/lfs/([0-9a-f]{64})", self.path):
            if hashlib.sha256(body).hexdigest() != m.group(1):
                self._reply(400, {"error": "content does not match oid"})
                return
            self.hub.lfs[m.group(1)] = body
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()
        else:
            self._reply(404, {"error": f"no route for PUT {self.path}"})
