package main

// -test checkpoint: kubelet's checkpoint API (KEP-2008, "forensic container checkpointing"):
// the CRI CheckpointContainer RPC (containerd >= 2.0, containerd#6965) on a running counter,
// which must leave the container running (the shim's checkpoint with --leave-running) and write
// the archive kubelet hands out (CRIU images under checkpoint/, rootfs-diff.tar, config.dump,
// spec.dump, status.dump, status, container.log). With -restore also the restore through CRI
// (containerd 2.3 only, enable_experimental_restore_via_create; containerd#10365, removed in
// 2.4): CreateContainer in a new pod whose image is the archive, StartContainer, and the counter
// goes on from its checkpointed memory instead of starting again at 1. Twice: with kubelet's
// default namespaces, and again (checks named sharedpid-*) in a pod that shares one PID namespace.

import (
	"archive/tar"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	rt "k8s.io/cri-api/pkg/apis/runtime/v1"
)

var (
	archiveDir   = flag.String("archive-dir", "", "-test checkpoint: where the checkpoint archive goes (default: -logdir)")
	withRestore  = flag.Bool("restore", false, "-test checkpoint: also restore the archive through CreateContainer (containerd 2.3)")
	cgroupParent = flag.String("cgroup-parent", "", "pods' cgroup parent (default: containerd's)")
	// Another runtime's checkpoint: kubelet may restore on a node whose runtime is not the one
	// that made the archive.
	restoreHandler = flag.String("restore-handler", "", "-restore: the restored pod's runtime handler (default: -handler)")
)

// What kubelet asks for by default (sandbox and containers alike): the pod's network namespace
// (CNI), the pod's IPC namespace, a PID namespace per container.
var podNamespaces = &rt.NamespaceOption{Network: rt.NamespaceMode_POD, Pid: rt.NamespaceMode_CONTAINER, Ipc: rt.NamespaceMode_POD}

const counterScript = `i=0; while :; do i=$((i+1)); echo $i > /tmp/count; echo tick $i; sleep 0.1; done`

type criT struct {
	ctx context.Context
	c   rt.RuntimeServiceClient
}

func (t criT) call() (context.Context, context.CancelFunc) {
	return context.WithTimeout(t.ctx, 120*time.Second)
}

func (t criT) runPod(name, uid, logs, handler string, ns *rt.NamespaceOption) (string, *rt.PodSandboxConfig, error) {
	cfg := &rt.PodSandboxConfig{
		Metadata:     &rt.PodSandboxMetadata{Name: name, Namespace: "default", Uid: uid},
		LogDirectory: logs,
		Linux: &rt.LinuxPodSandboxConfig{
			CgroupParent:    *cgroupParent,
			SecurityContext: &rt.LinuxSandboxSecurityContext{NamespaceOptions: ns},
		},
	}
	cx, cc := t.call()
	defer cc()
	r, err := t.c.RunPodSandbox(cx, &rt.RunPodSandboxRequest{Config: cfg, RuntimeHandler: handler})
	if err != nil {
		return "", nil, err
	}
	return r.PodSandboxId, cfg, nil
}

func (t criT) removePod(id string) error {
	cx, cc := t.call()
	_, err := t.c.StopPodSandbox(cx, &rt.StopPodSandboxRequest{PodSandboxId: id})
	cc()
	if err != nil {
		return err
	}
	cx, cc = t.call()
	defer cc()
	_, err = t.c.RemovePodSandbox(cx, &rt.RemovePodSandboxRequest{PodSandboxId: id})
	return err
}

func (t criT) status(id string) (*rt.ContainerStatus, error) {
	cx, cc := t.call()
	defer cc()
	r, err := t.c.ContainerStatus(cx, &rt.ContainerStatusRequest{ContainerId: id})
	if err != nil {
		return nil, err
	}
	return r.Status, nil
}

func (t criT) waitRunning(id string) error {
	var st *rt.ContainerStatus
	var err error
	for i := 0; i < 150; i++ {
		if st, err = t.status(id); err == nil && st.State == rt.ContainerState_CONTAINER_RUNNING {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		return err
	}
	return fmt.Errorf("state %v, want RUNNING (reason %q, message %q)", st.State, st.Reason, st.Message)
}

// count: the counter's value, read by exec from its file (read again when it caught the file
// between the shell's truncate and its write).
func (t criT) count(id string) (int, error) {
	var r *rt.ExecSyncResponse
	var err error
	for i := 0; i < 5; i++ {
		cx, cc := t.call()
		r, err = t.c.ExecSync(cx, &rt.ExecSyncRequest{ContainerId: id, Cmd: []string{"cat", "/tmp/count"}, Timeout: 30})
		cc()
		if err != nil {
			return 0, err
		}
		if n, e := strconv.Atoi(strings.TrimSpace(string(r.Stdout))); e == nil && r.ExitCode == 0 {
			return n, nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return 0, fmt.Errorf("cat /tmp/count: exit %d, stdout %q, stderr %q", r.ExitCode, r.Stdout, r.Stderr)
}

// waitCount waits until the counter is at least n.
func (t criT) waitCount(id string, n int) (int, error) {
	var c int
	var err error
	for i := 0; i < 150; i++ {
		if c, err = t.count(id); err == nil && c >= n {
			return c, nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		return c, err
	}
	return c, fmt.Errorf("counter at %d, waited for %d", c, n)
}

func (t criT) removeContainer(id string) {
	cx, cc := t.call()
	_, _ = t.c.StopContainer(cx, &rt.StopContainerRequest{ContainerId: id, Timeout: 0})
	cc()
	cx, cc = t.call()
	_, _ = t.c.RemoveContainer(cx, &rt.RemoveContainerRequest{ContainerId: id})
	cc()
}

// tarList: the archive's entries (names without a leading "./" or trailing "/") and sizes.
func tarList(path string) (map[string]int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string]int64{}
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		out[strings.TrimSuffix(strings.TrimPrefix(h.Name, "./"), "/")] = h.Size
	}
}

func checkpointMain(ctx context.Context, c rt.RuntimeServiceClient) {
	t := criT{ctx, c}
	// kubelet's default, and a pod with shareProcessNamespace: true (the counter is not its PID
	// namespace's init; the namespace is the pause container's).
	t.checkpointScenario("", podNamespaces)
	t.checkpointScenario("sharedpid-", &rt.NamespaceOption{Network: rt.NamespaceMode_POD, Pid: rt.NamespaceMode_POD, Ipc: rt.NamespaceMode_POD})
	fmt.Printf("%d passed, %d failed\n", npass, nfail)
	if nfail > 0 {
		os.Exit(1)
	}
}

// checkpointScenario: one pod with the namespaces ns; check names start with name.
func (t criT) checkpointScenario(name string, ns *rt.NamespaceOption) {
	c := t.c
	res := func(check string, err error) bool { return result(name+check, err) }
	dir := *archiveDir
	if dir == "" {
		dir = *logdir
	}
	uid := fmt.Sprintf("%d", time.Now().UnixNano())
	podLogs := filepath.Join(*logdir, "ck-"+name+"pod-"+*handler)
	_ = os.MkdirAll(podLogs, 0o755)
	_ = os.MkdirAll(dir, 0o755)
	archive := filepath.Join(dir, fmt.Sprintf("checkpoint-ck-%s%s_default-counter-%s.tar", name, *handler, uid))

	podID, podCfg, err := t.runPod("ck-"+name+*handler, uid, podLogs, *handler, ns)
	if !res("checkpoint-pod", err) {
		return
	}
	defer func() { res("checkpoint-pod-remove", t.removePod(podID)) }()
	cfg := &rt.ContainerConfig{
		Metadata: &rt.ContainerMetadata{Name: "counter"},
		Image:    &rt.ImageSpec{Image: *image},
		Command:  []string{"sh", "-c", counterScript},
		LogPath:  "counter.log",
		Linux:    &rt.LinuxContainerConfig{SecurityContext: &rt.LinuxContainerSecurityContext{NamespaceOptions: ns}},
	}
	cx, cc := t.call()
	r, err := c.CreateContainer(cx, &rt.CreateContainerRequest{PodSandboxId: podID, Config: cfg, SandboxConfig: podCfg})
	cc()
	if !res("checkpoint-counter-create", err) {
		return
	}
	id := r.ContainerId
	defer t.removeContainer(id)
	cx, cc = t.call()
	_, err = c.StartContainer(cx, &rt.StartContainerRequest{ContainerId: id})
	cc()
	if err == nil {
		err = t.waitRunning(id)
	}
	var before int
	if err == nil {
		// Two seconds of counting: a counter that started again would be far below this.
		before, err = t.waitCount(id, 20)
	}
	if !res("checkpoint-counter-running", err) {
		return
	}

	// kubelet's POST /checkpoint/{ns}/{pod}/{container} is this call.
	t0 := time.Now()
	cx, cc = t.call()
	_, err = c.CheckpointContainer(cx, &rt.CheckpointContainerRequest{ContainerId: id, Location: archive, Timeout: 60})
	cc()
	took := time.Since(t0)
	if !res("checkpoint-container", err) {
		return
	}
	fmt.Printf("# CheckpointContainer took %d ms\n", took.Milliseconds())

	// The archive: what containerd's CheckpointContainer writes (internal/cri/server/
	// container_checkpoint_linux.go): the CRIU image directory, the rw layer's diff, the
	// container's config/spec/status and its log.
	entries, err := tarList(archive)
	if err == nil {
		var missing []string
		for _, want := range []string{"checkpoint", "checkpoint/inventory.img", "checkpoint/descriptors.json",
			"config.dump", "spec.dump", "status.dump", "status", "container.log", "rootfs-diff.tar"} {
			if _, ok := entries[want]; !ok {
				missing = append(missing, want)
			}
		}
		var pages, cores int
		for name, size := range entries {
			if strings.HasPrefix(name, "checkpoint/pages-") && size > 0 {
				pages++
			}
			if strings.HasPrefix(name, "checkpoint/core-") {
				cores++
			}
		}
		if pages == 0 {
			missing = append(missing, "checkpoint/pages-*.img (non-empty)")
		}
		if cores == 0 {
			missing = append(missing, "checkpoint/core-*.img")
		}
		names := make([]string, 0, len(entries))
		top := []string{}
		for n := range entries {
			names = append(names, n)
			if !strings.HasPrefix(n, "checkpoint/") {
				top = append(top, n)
			}
		}
		sort.Strings(names)
		sort.Strings(top)
		fmt.Printf("# archive: %d entries, %d under checkpoint/; top level: %s\n", len(entries), len(entries)-len(top), strings.Join(top, " "))
		if len(missing) > 0 {
			err = fmt.Errorf("missing from %s: %s\nentries: %s", archive, strings.Join(missing, ", "), strings.Join(names, " "))
		}
	}
	res("checkpoint-archive", err)

	// Non-destructive: the container is still running and still counting.
	err = t.waitRunning(id)
	var after int
	if err == nil {
		var now int
		if now, err = t.count(id); err == nil {
			after, err = t.waitCount(id, now+3)
		}
	}
	if err == nil && after <= before {
		err = fmt.Errorf("counter %d after the checkpoint, %d before", after, before)
	}
	res("checkpoint-leaves-running", err)

	if !*withRestore {
		return
	}
	rh := *restoreHandler
	if rh == "" {
		rh = *handler
	}
	// Restore: a new pod, CreateContainer with the archive as the image (what
	// `crictl create POD container.json` with "image": "/path/checkpoint.tar" does).
	pod2, pod2Cfg, err := t.runPod("ck-"+name+"restore-"+*handler, uid+"-restore", podLogs, rh, ns)
	if !res("restore-pod", err) {
		return
	}
	defer func() { res("restore-pod-remove", t.removePod(pod2)) }()
	rcfg := &rt.ContainerConfig{
		Metadata: &rt.ContainerMetadata{Name: "counter"},
		Image:    &rt.ImageSpec{Image: archive},
		LogPath:  "counter-restored.log",
		Linux:    &rt.LinuxContainerConfig{SecurityContext: &rt.LinuxContainerSecurityContext{NamespaceOptions: ns}},
	}
	restoredAt := time.Now()
	cx, cc = t.call()
	r2, err := c.CreateContainer(cx, &rt.CreateContainerRequest{PodSandboxId: pod2, Config: rcfg, SandboxConfig: pod2Cfg})
	cc()
	if !res("restore-create-from-archive", err) {
		return
	}
	id2 := r2.ContainerId
	defer t.removeContainer(id2)
	cx, cc = t.call()
	_, err = c.StartContainer(cx, &rt.StartContainerRequest{ContainerId: id2})
	cc()
	if err == nil {
		err = t.waitRunning(id2)
	}
	if !res("restore-start", err) {
		return
	}
	// Its memory came back: the counter goes on above its value before the checkpoint (a fresh
	// start would count from 1 and be far below within the first second). Its stdout reaches the
	// new container's log, which starts with the old one (containerd carries it over from the
	// archive): lines written since the restore, none of them "tick 1".
	time.Sleep(300 * time.Millisecond)
	n, err := t.count(id2)
	if err == nil {
		var m int
		m, err = t.waitCount(id2, n+3)
		if err == nil && (n < before || m <= n) {
			err = fmt.Errorf("counter at %d then %d after the restore; %d before the checkpoint", n, m, before)
		}
	}
	if err == nil {
		var b []byte
		b, err = os.ReadFile(filepath.Join(podLogs, "counter-restored.log"))
		if err == nil {
			var newer, ones []string
			for _, l := range strings.Split(string(b), "\n") {
				ts, rest, _ := strings.Cut(l, " ")
				when, e := time.Parse(time.RFC3339Nano, ts)
				if e != nil || when.Before(restoredAt) {
					continue
				}
				newer = append(newer, l)
				if strings.HasSuffix(rest, " tick 1") {
					ones = append(ones, l)
				}
			}
			if len(newer) == 0 || len(ones) > 0 {
				err = fmt.Errorf("the restored container's log has %d lines since the restore (want some), %d of them \"tick 1\" (want none: it went on, did not start again):\n%s",
					len(newer), len(ones), string(b))
			}
		}
	}
	if res("restore-counter-continues", err) {
		fmt.Printf("# restored counter at %d (was %d before the checkpoint)\n", n, before)
	}
	// The restored container stops and is removed like any other (the deferred calls), and
	// the original keeps running alongside it.
	res("restore-original-still-running", t.waitRunning(id))
}
