#!/usr/bin/env python3
"""mkimage.py OUT.tar REPO:TAG ROOTFS_DIR ENTRYPOINT_JSON CMD_JSON

Writes a one-layer docker-archive (the `docker save` layout: manifest.json, an image config, a
layer tar) of ROOTFS_DIR, for `ctr images import`. Owners are written as root, modes and
symlinks as found."""
import hashlib, io, json, os, sys, tarfile

out, ref, root, entry, cmd = sys.argv[1:6]

layer = io.BytesIO()
with tarfile.open(fileobj=layer, mode="w", format=tarfile.PAX_FORMAT) as t:
    for d, dirs, files in os.walk(root):
        dirs.sort()
        for name in sorted(dirs) + sorted(files):
            p = os.path.join(d, name)
            ti = t.gettarinfo(p, arcname=os.path.relpath(p, root))
            ti.uid = ti.gid = 0
            ti.uname = ti.gname = "root"
            ti.mtime = 0
            if ti.isfile():
                with open(p, "rb") as f:
                    t.addfile(ti, f)
            else:
                t.addfile(ti)
data = layer.getvalue()
diff = hashlib.sha256(data).hexdigest()
config = {
    "architecture": "amd64",
    "os": "linux",
    "created": "1970-01-01T00:00:00Z",
    "config": {
        "Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],
        "Entrypoint": json.loads(entry),
        "Cmd": json.loads(cmd),
        "WorkingDir": "/",
    },
    "rootfs": {"type": "layers", "diff_ids": ["sha256:" + diff]},
    "history": [{"created": "1970-01-01T00:00:00Z", "created_by": "tests/k8s/mkimage.py"}],
}
cfg = json.dumps(config, sort_keys=True).encode()
cid = hashlib.sha256(cfg).hexdigest()
manifest = [{"Config": cid + ".json", "RepoTags": [ref], "Layers": [diff + "/layer.tar"]}]

def add(t, name, b):
    ti = tarfile.TarInfo(name)
    ti.size = len(b)
    ti.mode = 0o644
    t.addfile(ti, io.BytesIO(b))

with tarfile.open(out, "w") as t:
    add(t, cid + ".json", cfg)
    add(t, diff + "/layer.tar", data)
    add(t, "manifest.json", json.dumps(manifest).encode())
    add(t, "repositories", json.dumps({ref.rsplit(":", 1)[0]: {ref.rsplit(":", 1)[1]: diff}}).encode())
