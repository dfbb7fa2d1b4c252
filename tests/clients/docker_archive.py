#!/usr/bin/env python3
"""docker_archive.py LAYER.tar OUT.tar REPO:TAG [CONFIG-JSON]

Write a one-layer docker archive (what `docker load` and `ctr images import` read) from a
rootfs tarball, without podman or a registry. CONFIG-JSON is merged over the image config's
defaults (Env with a PATH, Cmd ["sh"]), e.g. '{"User":"1000"}' or
'{"Entrypoint":["/pause"],"Cmd":null}'.
"""
import hashlib
import io
import json
import sys
import tarfile
import time

layer, out, tag = sys.argv[1:4]
extra = json.loads(sys.argv[4]) if len(sys.argv) > 4 and sys.argv[4] else {}
data = open(layer, 'rb').read()
config = {"Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"], "Cmd": ["sh"]}
config.update(extra)
cfg = {"architecture": "amd64", "os": "linux", "created": "2024-01-01T00:00:00Z", "config": config,
       "rootfs": {"type": "layers", "diff_ids": ["sha256:" + hashlib.sha256(data).hexdigest()]}}
cb = json.dumps(cfg).encode()
cid = hashlib.sha256(cb).hexdigest()
manifest = [{"Config": cid + ".json", "RepoTags": [tag], "Layers": ["layer/layer.tar"]}]
with tarfile.open(out, 'w') as t:
    def add(name, b):
        ti = tarfile.TarInfo(name)
        ti.size = len(b)
        ti.mtime = int(time.time())
        t.addfile(ti, io.BytesIO(b))
    add(cid + ".json", cb)
    add("layer/layer.tar", data)
    add("manifest.json", json.dumps(manifest).encode())
