#!/usr/bin/env python3
"""make-bundles.py SPROUT WORK PODMAN_JSON: bundles for the demo, sharing WORK/rootfs.

minimal        `sprout spec` output, args ["true"], no terminal, relative cgroupsPath
minimal-show   the same, with a shell command that shows what the container sees
podman-default podman 4.3's config for `podman run IMAGE /bin/true` (seccomp, caps, rlimits)
"""
import json, os, subprocess, sys

sprout, work, podman_json = sys.argv[1:4]
rootfs = os.path.join(work, "rootfs")

def bundle(name, cfg):
    d = os.path.join(work, name)
    os.makedirs(d, exist_ok=True)
    cfg["root"] = {"path": rootfs, "readonly": True}
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    return d

tmp = os.path.join(work, "spec")
os.makedirs(tmp, exist_ok=True)
subprocess.run([sprout, "spec", "-b", tmp], check=True)
base = json.load(open(os.path.join(tmp, "config.json")))
base["process"]["terminal"] = False
base["linux"]["cgroupsPath"] = "sprout-demo/minimal"

m = json.loads(json.dumps(base)); m["process"]["args"] = ["true"]
bundle("minimal", m)

s = json.loads(json.dumps(base))
s["process"]["args"] = ["sh", "-c",
    "echo \"hello from $(hostname), I am pid $$ as $(id -u):$(id -g)\"; "
    "grep -E '^(CapEff|NoNewPrivs)' /proc/self/status; echo 'mounts:'; mount | awk '{print \"  \" $3 \" \" $5}' | head -12"]
s["linux"]["cgroupsPath"] = "sprout-demo/show"
bundle("minimal-show", s)

p = json.load(open(podman_json))
d = bundle("podman-default", p)
os.makedirs(os.path.join(d, "files", "shm"), exist_ok=True)
open(os.path.join(d, "files", "resolv.conf"), "w").write("nameserver 127.0.0.1\n")
open(os.path.join(d, "files", "hosts"), "w").write("127.0.0.1 localhost\n")
