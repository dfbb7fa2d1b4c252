// cri-bench: times a pod + container start through a CRI runtime service (containerd's CRI
// plugin), runtime handlers round-robin, for bench/clients.
//
//	cri-bench -endpoint unix:///path/containerd.sock -handlers sprout,runc -n 20 \
//	          -image localhost/busybox:bench -logdir DIR -cgroup-parent /NAME
//
// Per iteration and handler (the handler order rotates by one every iteration):
// RunPodSandbox (host network, so no CNI), CreateContainer (`true`), StartContainer: timed, the
// pod + container start a kubelet asks for. Then, timed apart: wait for the container to exit,
// StopPodSandbox + RemovePodSandbox. One JSON line per start on stdout, with CLOCK_MONOTONIC
// seconds (the clock of the runtime wrapper's log) at each step:
//
//	{"handler":"sprout","i":0,"t0":..,"pod":..,"create":..,"start":..,"exited":..,"removed":..}
//
// Exit status 1 on the first error (its message on stderr).
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	rt "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func mono() float64 {
	var ts syscall.Timespec
	syscall.Syscall(syscall.SYS_CLOCK_GETTIME, 1 /* CLOCK_MONOTONIC */, uintptr(unsafe.Pointer(&ts)), 0)
	return float64(ts.Sec) + float64(ts.Nsec)/1e9
}

func die(format string, a ...interface{}) {
	fmt.Fprintf(os.Stderr, "cri-bench: "+format+"\n", a...)
	os.Exit(1)
}

func main() {
	endpoint := flag.String("endpoint", "", "CRI endpoint (unix://...)")
	handlers := flag.String("handlers", "sprout", "comma-separated runtime handlers")
	n := flag.Int("n", 10, "starts per handler")
	i0 := flag.Int("i0", 0, "number of the first iteration (names and the handler rotation)")
	image := flag.String("image", "", "container image (already present)")
	logdir := flag.String("logdir", "/tmp", "pod log directories go under it")
	cgparent := flag.String("cgroup-parent", "", "cgroup parent of every pod (cgroupfs path)")
	flag.Parse()
	hs := strings.Split(*handlers, ",")

	ctx := context.Background()
	dctx, dcancel := context.WithTimeout(ctx, 30*time.Second)
	conn, err := grpc.DialContext(dctx, *endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithBlock())
	dcancel()
	if err != nil {
		die("connect: %v", err)
	}
	defer conn.Close()
	c := rt.NewRuntimeServiceClient(conn)
	call := func() (context.Context, context.CancelFunc) { return context.WithTimeout(ctx, 120*time.Second) }
	out := json.NewEncoder(os.Stdout)

	for i := *i0; i < *i0+*n; i++ {
		for k := range hs {
			h := hs[(i+k)%len(hs)]
			name := fmt.Sprintf("b%d-%s", i, h)
			logs := filepath.Join(*logdir, name)
			_ = os.MkdirAll(logs, 0o755)
			podCfg := &rt.PodSandboxConfig{
				Metadata:     &rt.PodSandboxMetadata{Name: name, Namespace: "bench", Uid: fmt.Sprintf("%d", time.Now().UnixNano()), Attempt: 0},
				LogDirectory: logs,
				Linux: &rt.LinuxPodSandboxConfig{
					CgroupParent: *cgparent,
					SecurityContext: &rt.LinuxSandboxSecurityContext{
						NamespaceOptions: &rt.NamespaceOption{Network: rt.NamespaceMode_NODE, Pid: rt.NamespaceMode_CONTAINER, Ipc: rt.NamespaceMode_POD},
					},
				},
			}
			rec := map[string]interface{}{"handler": h, "i": i}
			rec["t0"] = mono()
			cx, cc := call()
			pod, err := c.RunPodSandbox(cx, &rt.RunPodSandboxRequest{Config: podCfg, RuntimeHandler: h})
			cc()
			if err != nil {
				die("%s: RunPodSandbox: %v", name, err)
			}
			rec["pod"] = mono()
			cfg := &rt.ContainerConfig{
				Metadata: &rt.ContainerMetadata{Name: "c"},
				Image:    &rt.ImageSpec{Image: *image},
				Command:  []string{"true"},
				LogPath:  "c.log",
			}
			cx, cc = call()
			cr, err := c.CreateContainer(cx, &rt.CreateContainerRequest{PodSandboxId: pod.PodSandboxId, Config: cfg, SandboxConfig: podCfg})
			cc()
			if err != nil {
				die("%s: CreateContainer: %v", name, err)
			}
			rec["create"] = mono()
			cx, cc = call()
			_, err = c.StartContainer(cx, &rt.StartContainerRequest{ContainerId: cr.ContainerId})
			cc()
			if err != nil {
				die("%s: StartContainer: %v", name, err)
			}
			rec["start"] = mono()
			// Teardown (not part of the start): the container exits by itself, then the pod goes.
			deadline := time.Now().Add(60 * time.Second)
			for {
				cx, cc = call()
				st, err := c.ContainerStatus(cx, &rt.ContainerStatusRequest{ContainerId: cr.ContainerId})
				cc()
				if err != nil {
					die("%s: ContainerStatus: %v", name, err)
				}
				if st.Status.State == rt.ContainerState_CONTAINER_EXITED {
					if st.Status.ExitCode != 0 {
						die("%s: container exited %d (%s)", name, st.Status.ExitCode, st.Status.Message)
					}
					break
				}
				if time.Now().After(deadline) {
					die("%s: container still %v after 60 s", name, st.Status.State)
				}
				time.Sleep(5 * time.Millisecond)
			}
			rec["exited"] = mono()
			cx, cc = call()
			_, err = c.StopPodSandbox(cx, &rt.StopPodSandboxRequest{PodSandboxId: pod.PodSandboxId})
			cc()
			if err != nil {
				die("%s: StopPodSandbox: %v", name, err)
			}
			cx, cc = call()
			_, err = c.RemovePodSandbox(cx, &rt.RemovePodSandboxRequest{PodSandboxId: pod.PodSandboxId})
			cc()
			if err != nil {
				die("%s: RemovePodSandbox: %v", name, err)
			}
			rec["removed"] = mono()
			if err := out.Encode(rec); err != nil {
				die("stdout: %v", err)
			}
		}
	}
}
