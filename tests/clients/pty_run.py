#!/usr/bin/env python3
"""Run a command on a fresh pseudo-terminal, without needing one ourselves (CI has no tty).

usage: pty_run.py [--timeout S] [--send TEXT]... -- CMD ARGS...

Each --send TEXT is written to the terminal (with "\\n" escapes expanded) after the
output has been quiet for a moment, one after another. Prints everything read from
the terminal to stdout and exits with the command's exit status (124 on timeout).
"""
import fcntl
import os
import pty
import select
import signal
import struct
import termios
import sys
import time


def main():
    args = sys.argv[1:]
    timeout = 30.0
    sends = []
    while args and args[0] != "--":
        if args[0] == "--timeout":
            timeout = float(args[1])
            args = args[2:]
        elif args[0] == "--send":
            sends.append(args[1].encode().decode("unicode_escape").encode())
            args = args[2:]
        else:
            sys.exit(f"pty_run.py: unknown option {args[0]}")
    cmd = args[1:]
    if not cmd:
        sys.exit("pty_run.py: no command")
    pid, fd = pty.fork()
    if pid == 0:
        try:
            os.execvp(cmd[0], cmd)
        finally:
            os._exit(127)
    # A real terminal size (a fresh pty is 0x0), so clients pass one on to the container.
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 37, 101, 0, 0))
    out = bytearray()
    deadline = time.time() + timeout
    last = time.time()
    eof = False
    while time.time() < deadline:
        r, _, _ = select.select([fd], [], [], 0.1)
        if r:
            try:
                d = os.read(fd, 65536)
            except OSError:
                d = b""
            if not d:
                eof = True
                break
            out += d
            last = time.time()
        elif sends and time.time() - last > 0.7:
            os.write(fd, sends.pop(0))
            last = time.time()
        done, st = os.waitpid(pid, os.WNOHANG)
        if done:
            # Drain what is left.
            while True:
                r, _, _ = select.select([fd], [], [], 0.2)
                if not r:
                    break
                try:
                    d = os.read(fd, 65536)
                except OSError:
                    break
                if not d:
                    break
                out += d
            sys.stdout.write(out.decode(errors="replace"))
            sys.exit(os.waitstatus_to_exitcode(st))
    if not eof:
        os.kill(pid, signal.SIGKILL)
        sys.stdout.write(out.decode(errors="replace"))
        sys.stdout.write("\n[pty_run.py: timeout]\n")
        os.waitpid(pid, 0)
        sys.exit(124)
    _, st = os.waitpid(pid, 0)
    sys.stdout.write(out.decode(errors="replace"))
    sys.exit(os.waitstatus_to_exitcode(st))


if __name__ == "__main__":
    main()
