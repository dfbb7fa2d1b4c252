// cri-smoke: drives a CRI runtime service (containerd's CRI plugin) through a pod and container
// lifecycle with a given runtime handler (RuntimeClass), printing PASS/FAIL lines.
//
//	cri-smoke -endpoint unix:///path/containerd.sock -handler sprout -image localhost/busybox:sprout -logdir DIR
//
// A stand-in for critest (which the Go module proxy does not serve here); it checks what a
// kubelet needs from the runtime: sandbox, create/start, logs, exec (sync, exit codes),
// resource update, stop/remove, exit codes, and errors surfacing through CreateContainer.
// -test checkpoint runs kubelet's checkpoint API instead (checkpoint.go; containerd >= 2.0).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	rt "k8s.io/cri-api/pkg/apis/runtime/v1"
)

var (
	endpoint     = flag.String("endpoint", "", "CRI endpoint (unix://...)")
	handler      = flag.String("handler", "sprout", "runtime handler (RuntimeClass handler)")
	image        = flag.String("image", "localhost/busybox:sprout", "container image (already present)")
	logdir       = flag.String("logdir", "/tmp", "pod log directory")
	prefix       = flag.String("prefix", "cri", "check name prefix")
	testSet      = flag.String("test", "smoke", "smoke: the pod/container lifecycle checks; checkpoint: CheckpointContainer (and -restore), checkpoint.go")
	npass, nfail int
)

func result(name string, err error) bool {
	if err == nil {
		npass++
		fmt.Printf("PASS %s/%s\n", *prefix, name)
		return true
	}
	nfail++
	fmt.Printf("FAIL %s/%s\n", *prefix, name)
	for _, l := range strings.Split(err.Error(), "\n") {
		fmt.Printf("    | %s\n", l)
	}
	return false
}

func main() {
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	conn, err := grpc.DialContext(ctx, *endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithBlock())
	if !result("connect", err) {
		os.Exit(1)
	}
	defer conn.Close()
	c := rt.NewRuntimeServiceClient(conn)
	call := func() (context.Context, context.CancelFunc) { return context.WithTimeout(ctx, 60*time.Second) }

	{
		cx, cc := call()
		v, err := c.Version(cx, &rt.VersionRequest{})
		cc()
		if result("version", err) {
			fmt.Printf("# %s %s (CRI %s)\n", v.RuntimeName, v.RuntimeVersion, v.RuntimeApiVersion)
		} else {
			os.Exit(1)
		}
	}
	if *testSet == "checkpoint" {
		checkpointMain(ctx, c)
		return
	}

	uid := fmt.Sprintf("%d", time.Now().UnixNano())
	podLogs := filepath.Join(*logdir, "pod-"+*handler)
	_ = os.MkdirAll(podLogs, 0o755)
	podCfg := &rt.PodSandboxConfig{
		Metadata:     &rt.PodSandboxMetadata{Name: "smoke-" + *handler, Namespace: "default", Uid: uid, Attempt: 0},
		LogDirectory: podLogs,
		Linux: &rt.LinuxPodSandboxConfig{
			CgroupParent: "",
			SecurityContext: &rt.LinuxSandboxSecurityContext{
				// Host network: no CNI needed on the test host.
				NamespaceOptions: &rt.NamespaceOption{Network: rt.NamespaceMode_NODE, Pid: rt.NamespaceMode_POD, Ipc: rt.NamespaceMode_POD},
			},
		},
	}
	cx, cc := call()
	pod, err := c.RunPodSandbox(cx, &rt.RunPodSandboxRequest{Config: podCfg, RuntimeHandler: *handler})
	cc()
	if !result("run-pod-sandbox", err) {
		os.Exit(1)
	}
	podID := pod.PodSandboxId
	defer func() {
		cx, cc := call()
		_, err := c.StopPodSandbox(cx, &rt.StopPodSandboxRequest{PodSandboxId: podID})
		cc()
		result("stop-pod-sandbox", err)
		cx, cc = call()
		_, err = c.RemovePodSandbox(cx, &rt.RemovePodSandboxRequest{PodSandboxId: podID})
		cc()
		result("remove-pod-sandbox", err)
		fmt.Printf("%d passed, %d failed\n", npass, nfail)
		if nfail > 0 {
			os.Exit(1)
		}
	}()
	{
		cx, cc := call()
		st, err := c.PodSandboxStatus(cx, &rt.PodSandboxStatusRequest{PodSandboxId: podID})
		cc()
		if err == nil && st.Status.State != rt.PodSandboxState_SANDBOX_READY {
			err = fmt.Errorf("sandbox state %v", st.Status.State)
		}
		result("pod-sandbox-ready", err)
	}

	mk := func(name string, cmd []string) (string, error) {
		cfg := &rt.ContainerConfig{
			Metadata: &rt.ContainerMetadata{Name: name},
			Image:    &rt.ImageSpec{Image: *image},
			Command:  cmd,
			LogPath:  name + ".log",
			Envs:     []*rt.KeyValue{{Key: "SMOKE", Value: "yes"}},
			Linux:    &rt.LinuxContainerConfig{Resources: &rt.LinuxContainerResources{MemoryLimitInBytes: 64 << 20}},
		}
		cx, cc := call()
		defer cc()
		r, err := c.CreateContainer(cx, &rt.CreateContainerRequest{PodSandboxId: podID, Config: cfg, SandboxConfig: podCfg})
		if err != nil {
			return "", err
		}
		return r.ContainerId, nil
	}
	start := func(id string) error {
		cx, cc := call()
		defer cc()
		_, err := c.StartContainer(cx, &rt.StartContainerRequest{ContainerId: id})
		return err
	}
	status := func(id string) (*rt.ContainerStatus, error) {
		cx, cc := call()
		defer cc()
		r, err := c.ContainerStatus(cx, &rt.ContainerStatusRequest{ContainerId: id})
		if err != nil {
			return nil, err
		}
		return r.Status, nil
	}
	waitState := func(id string, want rt.ContainerState) (*rt.ContainerStatus, error) {
		var st *rt.ContainerStatus
		var err error
		for i := 0; i < 100; i++ {
			st, err = status(id)
			if err == nil && st.State == want {
				return st, nil
			}
			time.Sleep(100 * time.Millisecond)
		}
		if err != nil {
			return nil, err
		}
		return st, fmt.Errorf("state %v, want %v (reason %q, message %q)", st.State, want, st.Reason, st.Message)
	}
	remove := func(id string) error {
		cx, cc := call()
		defer cc()
		_, err := c.RemoveContainer(cx, &rt.RemoveContainerRequest{ContainerId: id})
		return err
	}

	// A long-running container: start, logs, exec, update, stop, remove.
	id, err := mk("main", []string{"sh", "-c", "echo hello-from-$SMOKE; trap 'echo got-term; exit 0' TERM; while :; do sleep 0.1; done"})
	if result("create-container", err) {
		result("start-container", start(id))
		_, err = waitState(id, rt.ContainerState_CONTAINER_RUNNING)
		result("container-running", err)
		{
			var b []byte
			for i := 0; i < 50; i++ {
				b, err = os.ReadFile(filepath.Join(podLogs, "main.log"))
				if err == nil && strings.Contains(string(b), "hello-from-yes") {
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
			if err == nil && !strings.Contains(string(b), "hello-from-yes") {
				err = fmt.Errorf("log: %q", string(b))
			}
			result("container-log", err)
		}
		{
			cx, cc := call()
			r, err := c.ExecSync(cx, &rt.ExecSyncRequest{ContainerId: id, Cmd: []string{"sh", "-c", "echo exec-$SMOKE; exit 3"}, Timeout: 30})
			cc()
			if err == nil && (r.ExitCode != 3 || strings.TrimSpace(string(r.Stdout)) != "exec-yes") {
				err = fmt.Errorf("exit %d stdout %q stderr %q", r.ExitCode, r.Stdout, r.Stderr)
			}
			result("exec-sync", err)
		}
		{
			cx, cc := call()
			r, err := c.ExecSync(cx, &rt.ExecSyncRequest{ContainerId: id, Cmd: []string{"cat", "/sys/fs/cgroup/memory/memory.limit_in_bytes"}, Timeout: 30})
			cc()
			if err == nil && strings.TrimSpace(string(r.Stdout)) != fmt.Sprint(64<<20) {
				err = fmt.Errorf("memory limit %q %q", r.Stdout, r.Stderr)
			}
			result("memory-limit", err)
		}
		{
			cx, cc := call()
			_, err := c.UpdateContainerResources(cx, &rt.UpdateContainerResourcesRequest{ContainerId: id, Linux: &rt.LinuxContainerResources{MemoryLimitInBytes: 96 << 20}})
			cc()
			if err == nil {
				cx, cc := call()
				r, e := c.ExecSync(cx, &rt.ExecSyncRequest{ContainerId: id, Cmd: []string{"cat", "/sys/fs/cgroup/memory/memory.limit_in_bytes"}, Timeout: 30})
				cc()
				if e != nil {
					err = e
				} else if strings.TrimSpace(string(r.Stdout)) != fmt.Sprint(96<<20) {
					err = fmt.Errorf("after update: memory limit %q", r.Stdout)
				}
			}
			result("update-container-resources", err)
		}
		{
			cx, cc := call()
			_, err := c.ExecSync(cx, &rt.ExecSyncRequest{ContainerId: id, Cmd: []string{"/no/such/binary"}, Timeout: 30})
			cc()
			// runc: an error (or exit code 126/127) comes back; either way not a hang.
			fmt.Printf("# exec of a missing binary: %v\n", err)
		}
		{
			cx, cc := call()
			_, err := c.StopContainer(cx, &rt.StopContainerRequest{ContainerId: id, Timeout: 10})
			cc()
			if err == nil {
				var st *rt.ContainerStatus
				st, err = waitState(id, rt.ContainerState_CONTAINER_EXITED)
				if err == nil && st.ExitCode != 0 {
					err = fmt.Errorf("exit code %d after SIGTERM (trap exits 0)", st.ExitCode)
				}
			}
			result("stop-container", err)
		}
		result("remove-container", remove(id))
	}

	// A locked-down container: user, read-only rootfs, RuntimeDefault seccomp, no capabilities,
	// no_new_privs, masked paths (what restricted pod security asks for).
	{
		ro := int64(65534)
		cfg := &rt.ContainerConfig{
			Metadata: &rt.ContainerMetadata{Name: "secure"},
			Image:    &rt.ImageSpec{Image: *image},
			Command:  []string{"sh", "-c", "grep -E '^(Uid|CapEff|NoNewPrivs|Seccomp):' /proc/self/status; touch /x 2>&1; cat /proc/kcore 2>&1 | head -c 60; echo; sleep 1000"},
			LogPath:  "secure.log",
			Linux: &rt.LinuxContainerConfig{SecurityContext: &rt.LinuxContainerSecurityContext{
				RunAsUser:        &rt.Int64Value{Value: ro},
				ReadonlyRootfs:   true,
				NoNewPrivs:       true,
				Capabilities:     &rt.Capability{DropCapabilities: []string{"ALL"}},
				Seccomp:          &rt.SecurityProfile{ProfileType: rt.SecurityProfile_RuntimeDefault},
				NamespaceOptions: &rt.NamespaceOption{Network: rt.NamespaceMode_NODE, Pid: rt.NamespaceMode_POD, Ipc: rt.NamespaceMode_POD},
			}},
		}
		cx, cc := call()
		r, err := c.CreateContainer(cx, &rt.CreateContainerRequest{PodSandboxId: podID, Config: cfg, SandboxConfig: podCfg})
		cc()
		if err == nil {
			id := r.ContainerId
			if err = start(id); err == nil {
				if _, err = waitState(id, rt.ContainerState_CONTAINER_RUNNING); err == nil {
					var b []byte
					for i := 0; i < 50; i++ {
						b, _ = os.ReadFile(filepath.Join(podLogs, "secure.log"))
						if strings.Contains(string(b), "Seccomp") && strings.Count(string(b), "\n") >= 6 {
							break
						}
						time.Sleep(100 * time.Millisecond)
					}
					out := string(b)
					for _, want := range []string{"Uid:\t65534", "CapEff:\t0000000000000000", "NoNewPrivs:\t1", "Seccomp:\t2", "Read-only file system"} {
						if !strings.Contains(out, want) {
							err = fmt.Errorf("missing %q in:\n%s", want, out)
							break
						}
					}
				}
			}
			cx, cc := call()
			_, _ = c.StopContainer(cx, &rt.StopContainerRequest{ContainerId: id, Timeout: 0})
			cc()
			_ = remove(id)
		}
		result("restricted-container", err)
	}

	// Exit codes.
	id, err = mk("exit3", []string{"sh", "-c", "exit 3"})
	if result("create-exit3", err) {
		err = start(id)
		if err == nil {
			var st *rt.ContainerStatus
			st, err = waitState(id, rt.ContainerState_CONTAINER_EXITED)
			if err == nil && st.ExitCode != 3 {
				err = fmt.Errorf("exit code %d, want 3", st.ExitCode)
			}
		}
		result("exit-code", err)
		_ = remove(id)
	}

	// A missing executable: runc fails CreateContainer/StartContainer with the reason.
	id, err = mk("enoent", []string{"/no/such/binary"})
	if err == nil {
		err = start(id)
		if err == nil {
			st, e := waitState(id, rt.ContainerState_CONTAINER_EXITED)
			if e == nil {
				err = fmt.Errorf("started; exited %d (reason %q, message %q)", st.ExitCode, st.Reason, st.Message)
			} else {
				err = fmt.Errorf("started: %v", e)
			}
		} else if !strings.Contains(err.Error(), "no such file") && !strings.Contains(err.Error(), "No such file") {
			err = fmt.Errorf("start failed without the reason: %v", err)
		} else {
			fmt.Printf("# %v\n", err)
			err = nil
		}
		_ = remove(id)
	}
	result("missing-executable-fails-start", err)

	// A second pod with its own network namespace (made by containerd, set up by CNI's
	// loopback plugin) and UTS namespace: the container joins them by path.
	podCfg2 := &rt.PodSandboxConfig{
		Metadata:     &rt.PodSandboxMetadata{Name: "smoke-net-" + *handler, Namespace: "default", Uid: uid + "-net", Attempt: 0},
		Hostname:     "smoke-pod",
		LogDirectory: podLogs,
		Linux: &rt.LinuxPodSandboxConfig{SecurityContext: &rt.LinuxSandboxSecurityContext{
			NamespaceOptions: &rt.NamespaceOption{Network: rt.NamespaceMode_POD, Pid: rt.NamespaceMode_CONTAINER, Ipc: rt.NamespaceMode_POD},
		}},
	}
	cx, cc = call()
	pod2, err := c.RunPodSandbox(cx, &rt.RunPodSandboxRequest{Config: podCfg2, RuntimeHandler: *handler})
	cc()
	if result("pod-network-sandbox", err) {
		cfg := &rt.ContainerConfig{
			Metadata: &rt.ContainerMetadata{Name: "net"},
			Image:    &rt.ImageSpec{Image: *image},
			Command:  []string{"sleep", "1000"},
			LogPath:  "net.log",
		}
		cx, cc := call()
		r, err := c.CreateContainer(cx, &rt.CreateContainerRequest{PodSandboxId: pod2.PodSandboxId, Config: cfg, SandboxConfig: podCfg2})
		cc()
		if err == nil {
			id := r.ContainerId
			if err = start(id); err == nil {
				cx, cc := call()
				x, e := c.ExecSync(cx, &rt.ExecSyncRequest{ContainerId: id, Cmd: []string{"sh", "-c", "hostname; ip -o link show lo; readlink /proc/1/ns/net /proc/self/ns/net"}, Timeout: 30})
				cc()
				if e != nil {
					err = e
				} else {
					out := string(x.Stdout) + string(x.Stderr)
					if !strings.Contains(out, "smoke-pod\n") || !strings.Contains(out, "<LOOPBACK,UP") {
						err = fmt.Errorf("want hostname smoke-pod and lo UP, got:\n%s", out)
					}
				}
			}
			cx, cc := call()
			_, _ = c.StopContainer(cx, &rt.StopContainerRequest{ContainerId: id, Timeout: 0})
			cc()
			_ = remove(id)
		}
		result("pod-network-container", err)
		cx, cc = call()
		_, _ = c.StopPodSandbox(cx, &rt.StopPodSandboxRequest{PodSandboxId: pod2.PodSandboxId})
		cc()
		cx, cc = call()
		_, err = c.RemovePodSandbox(cx, &rt.RemovePodSandboxRequest{PodSandboxId: pod2.PodSandboxId})
		cc()
		result("pod-network-remove", err)
	}
}
