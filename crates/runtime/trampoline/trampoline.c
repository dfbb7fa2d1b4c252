/*
 * sprout's exec trampoline: the last program the runtime runs before the container's own.
 *
 * Why it exists (CVE-2019-5736): until a container process execs, it is a clone of the runtime,
 * so /proc/<pid>/exe is the runtime's binary on the host. A process in the container that can
 * open that link (CAP_SYS_PTRACE, or a `#!/proc/self/exe` script making the kernel run the
 * runtime itself inside the container) keeps the fd and rewrites the host binary once the
 * runtime exits. sprout therefore makes every process that a container can see be backed by
 * this tiny program instead, loaded from a sealed memfd that belongs to nobody: once the runtime
 * has set a process up (namespaces, mounts, credentials, seccomp), it execs the trampoline,
 * which does the one or two remaining steps and execs the container's program.
 *
 * No libc: raw syscalls only, static, a few hundred bytes of code. argv[0] selects the mode:
 *
 *   sprout-init  FIFO PATH ARG0 ARG...
 *       The container's init. FIFO is the exec fifo's fd ("-" for none): block until `start`
 *       writes to it (a terminating signal meanwhile ends it, see exit_on_signals), then
 *       execve(PATH, ARG0..., envp). The fifo stays open until that execve
 *       (close-on-exec), so `start` sees the hang-up only once the program runs.
 *   sprout-spawn CHAN TTY PATH ARG0 ARG...
 *       `exec`: the caller has joined the container's pid namespace for its children only, so
 *       the process the container sees is born here, already backed by the trampoline. Fork
 *       with CLONE_PARENT (the runtime stays the parent and reaps it), send "P<pid>" on the
 *       channel CHAN and exit. The child becomes a session leader with the terminal on fd 0
 *       when TTY is "t", then execs PATH.
 *
 * A failed execve is reported as "X<errno>" on CHAN (spawn) or on stderr (init); exit 127.
 * Anything else (for instance a `#!/proc/self/exe` script that leads here) exits 127.
 */

#if defined(__x86_64__)
#define NR_read 0
#define NR_write 1
#define NR_close 3
#define NR_ioctl 16
#define NR_sendto 44
#define NR_clone 56
#define NR_execve 59
#define NR_exit_group 231
#define NR_fcntl 72
#define NR_setsid 112
#define NR_rt_sigaction 13

static long sys6(long n, long a, long b, long c, long d, long e, long f)
{
	register long r10 __asm__("r10") = d;
	register long r8 __asm__("r8") = e;
	register long r9 __asm__("r9") = f;
	long ret;
	__asm__ volatile("syscall"
			 : "=a"(ret)
			 : "a"(n), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8), "r"(r9)
			 : "rcx", "r11", "memory");
	return ret;
}

__asm__(".text\n"
	".global _start\n"
	"_start:\n"
	"  xor %rbp, %rbp\n"
	"  mov %rsp, %rdi\n"
	"  and $-16, %rsp\n"
	"  call tramp_main\n"
	"  hlt\n");

#elif defined(__aarch64__)
#define NR_read 63
#define NR_write 64
#define NR_close 57
#define NR_ioctl 29
#define NR_sendto 206
#define NR_clone 220
#define NR_execve 221
#define NR_exit_group 94
#define NR_fcntl 25
#define NR_setsid 157
#define NR_rt_sigaction 134

static long sys6(long n, long a, long b, long c, long d, long e, long f)
{
	register long x8 __asm__("x8") = n;
	register long x0 __asm__("x0") = a;
	register long x1 __asm__("x1") = b;
	register long x2 __asm__("x2") = c;
	register long x3 __asm__("x3") = d;
	register long x4 __asm__("x4") = e;
	register long x5 __asm__("x5") = f;
	__asm__ volatile("svc 0"
			 : "+r"(x0)
			 : "r"(x8), "r"(x1), "r"(x2), "r"(x3), "r"(x4), "r"(x5)
			 : "memory");
	return x0;
}

__asm__(".text\n"
	".global _start\n"
	"_start:\n"
	"  mov x29, #0\n"
	"  mov x30, #0\n"
	"  mov x0, sp\n"
	"  bl tramp_main\n"
	"  brk #0\n");
#else
#error "sprout's trampoline supports x86_64 and aarch64"
#endif

#define EINTR 4
#define F_SETFD 2
#define FD_CLOEXEC 1
#define TIOCSCTTY 0x540E
#define SIGCHLD 17
#define CLONE_PARENT 0x00008000
#define MSG_NOSIGNAL 0x4000

static long sys3(long n, long a, long b, long c)
{
	return sys6(n, a, b, c, 0, 0, 0);
}

static __attribute__((noreturn)) void die(int code)
{
	for (;;)
		sys3(NR_exit_group, code, 0, 0);
}

/*
 * While the init waits for `start`, it is the container's pid 1, and the kernel drops a signal
 * whose action is the default at a namespace's init: `kill TERM` (or SIGTERM through a pidfd) of
 * a created container would do nothing. runc's waiting init exits on them (the Go runtime's
 * handlers), so the usual terminating signals get a handler here that exits with 128 + the
 * signal. execve resets caught signals to the default, so the container's program starts with
 * the dispositions it inherited.
 */
struct ksigaction {
	void (*handler)(int);
	unsigned long flags;
	void (*restorer)(void);
	unsigned long mask;
};

static void on_signal(int sig)
{
	die(128 + sig);
}

/* Never reached (on_signal does not return), but given with SA_RESTORER: older x86_64 kernels
 * refuse to deliver to a handler without one (the frame set-up fails with SIGSEGV). */
static void no_return(void)
{
	die(127);
}

#define SA_RESTORER 0x04000000

static void exit_on_signals(void)
{
	static const int sigs[] = { 1 /* HUP */, 2 /* INT */, 3 /* QUIT */,
				    10 /* USR1 */, 12 /* USR2 */, 15 /* TERM */ };
	struct ksigaction sa = { on_signal, SA_RESTORER, no_return, ~0UL };
	unsigned i;
	for (i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
		sys6(NR_rt_sigaction, sigs[i], (long)&sa, 0, sizeof(sa.mask), 0, 0);
}

static int streq(const char *a, const char *b)
{
	while (*a && *a == *b)
		a++, b++;
	return *a == *b;
}

static long slen(const char *s)
{
	long n = 0;
	while (s[n])
		n++;
	return n;
}

/* A non-negative decimal fd, or -1 ("-" or anything else). */
static int parse_fd(const char *s)
{
	long v = 0;
	if (!*s)
		return -1;
	for (; *s; s++) {
		if (*s < '0' || *s > '9' || v > 1000000)
			return -1;
		v = v * 10 + (*s - '0');
	}
	return (int)v;
}

/* Writes tag + decimal value into buf; returns the length. */
static long fmt_tagged(char *buf, char tag, long v)
{
	char tmp[24];
	long n = 0, i = 0;
	if (v < 0)
		v = -v;
	do {
		tmp[n++] = (char)('0' + v % 10);
		v /= 10;
	} while (v && n < (long)sizeof(tmp));
	buf[i++] = tag;
	while (n)
		buf[i++] = tmp[--n];
	return i;
}

/* The errors execve gives, in Go's words (runc prints these). */
static const char *errno_text(long e)
{
	switch (e) {
	case 1: return "operation not permitted";
	case 2: return "no such file or directory";
	case 7: return "argument list too long";
	case 8: return "exec format error";
	case 12: return "cannot allocate memory";
	case 13: return "permission denied";
	case 20: return "not a directory";
	case 21: return "is a directory";
	case 26: return "text file busy";
	case 36: return "file name too long";
	case 40: return "too many levels of symbolic links";
	}
	return 0;
}

static void say(int fd, const char *s, long n)
{
	while (n > 0) {
		long w = sys3(NR_write, fd, (long)s, n);
		if (w == -EINTR)
			continue;
		if (w <= 0)
			return;
		s += w;
		n -= w;
	}
}

__attribute__((used, noreturn)) void tramp_main(long *sp)
{
	long argc = sp[0];
	char **argv = (char **)(sp + 1);
	char **envp = argv + argc + 1;
	char buf[32];
	const char *text;
	long n, r;

	if (argc >= 4 && streq(argv[0], "sprout-init")) {
		int fifo = parse_fd(argv[1]);
		if (fifo >= 0) {
			char b;
			exit_on_signals();
			do
				r = sys3(NR_read, fifo, (long)&b, 1);
			while (r == -EINTR);
			sys3(NR_fcntl, fifo, F_SETFD, FD_CLOEXEC);
		}
		r = sys3(NR_execve, (long)argv[2], (long)(argv + 3), (long)envp);
		/* runc's words, which its clients and tests read: "exec PATH: TEXT", TEXT as Go
		 * writes the errno (strerror, lower case). */
		say(2, "exec ", 5);
		say(2, argv[2], slen(argv[2]));
		say(2, ": ", 2);
		if ((text = errno_text(-r))) {
			say(2, text, slen(text));
		} else {
			n = fmt_tagged(buf, ' ', -r);
			say(2, "errno", 5);
			say(2, buf, n);
		}
		say(2, "\n", 1);
		die(127);
	}
	if (argc >= 5 && streq(argv[0], "sprout-spawn")) {
		int chan = parse_fd(argv[1]);
		long pid;
		if (chan < 0)
			die(127);
		sys3(NR_fcntl, chan, F_SETFD, FD_CLOEXEC);
		pid = sys6(NR_clone, CLONE_PARENT | SIGCHLD, 0, 0, 0, 0, 0);
		if (pid == 0) {
			/* Its own session and process group inside the container, terminal or not,
			 * as runc (nsexec stage 2 always calls setsid). */
			sys3(NR_setsid, 0, 0, 0);
			if (streq(argv[2], "t")) {
				r = sys3(NR_ioctl, 0, TIOCSCTTY, 0);
				if (r < 0) {
					n = fmt_tagged(buf, 'Y', r);
					sys6(NR_sendto, chan, (long)buf, n, MSG_NOSIGNAL, 0, 0);
					die(127);
				}
			}
			r = sys3(NR_execve, (long)argv[3], (long)(argv + 4), (long)envp);
			n = fmt_tagged(buf, 'X', r);
			sys6(NR_sendto, chan, (long)buf, n, MSG_NOSIGNAL, 0, 0);
			die(127);
		}
		n = fmt_tagged(buf, pid < 0 ? 'F' : 'P', pid);
		sys6(NR_sendto, chan, (long)buf, n, MSG_NOSIGNAL, 0, 0);
		die(pid < 0 ? 1 : 0);
	}
	die(127);
}
