/* hold: what holds the agent's place in an idle local sandbox (libc only; see hold.py).
 *
 *   hold PROTOCOL SOCKET READY_FD [--user=UID:GID[:GROUP...]] [--held=AGENT,EXEC,STATE,LISTENER] -- PYTHON...
 *   hold --check      prints "hutch-hold KEY" (the daemon's test that a cached build is whole)
 *   hold --launch [--procs=FILE]... [--into=DIR] [--user=UID:GID] [--rlimit=RESOURCE:VALUE]... -- COMMAND...
 *                     the daemon's launcher of bwrap (see host.py): joins the cgroups (writes 0,
 *                     "the writer", to each FILE: v1's tasks, v2's cgroup.procs; this process has
 *                     one thread) and starts COMMAND in the v2 cgroup DIR (see start_in), drops
 *                     to UID:GID with no supplementary groups,
 *                     sets the rlimits, then execv()s COMMAND (a full path); exit 125 if any fails.
 *                     One small exec in place of sh and setpriv (about 2.5 ms less per create).
 *
 * It binds the agent's two sockets (SOCKET, agent.sock, and exec.sock beside it), writes
 * "ready" to READY_FD, and waits. It answers the requests an idle sandbox gets (ping,
 * configure, runs, listen, unlisten) itself; the configure frames are kept in a memfd. On
 * anything else (a connection on exec.sock, left in its backlog; another request, already
 * read) it execve()s the Python agent, PYTHON... followed by SOCKET -1
 * --held=AGENT,EXEC,STATE,CONN,PENDING,LISTENER: the same process (pid, cgroup, uid,
 * seccomp filter, no_new_privs), its sockets inherited. --held (from an agent going back to
 * lean) adopts the sockets, the state and the proxy listener instead of making them.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef HOLD_KEY
#define HOLD_KEY "dev"
#endif
#define MAX_FRAME (1 << 20)
#define MAX_STATE (8 << 20) /* configure frames kept; past it the Python agent takes over */

extern char **environ;
static int agent_fd = -1, exec_fd = -1, state_fd = -1, listener_fd = -1;
static long state_size;
static const char *protocol, *sock_path;
static char **python;

static void die(const char *what) {
    dprintf(2, "hutch hold: %s: %s\n", what, strerror(errno));
    _exit(1);
}

static int listen_unix(const char *path) {
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof sa.sun_path) die("socket path too long");
    strcpy(sa.sun_path, path);
    unlink(path);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof sa) < 0 || chmod(path, 0600) < 0 || listen(fd, 64) < 0) die(path);
    return fd;
}

/* -- frames ------------------------------------------------------------------------------ */

static int send_msg(int fd, const char *json, int attach) {
    size_t n = strlen(json);
    unsigned char head[5] = {n >> 24, n >> 16, n >> 8, n, 'J'};
    struct iovec iov[2] = {{head, 5}, {(void *)json, n}};
    union {
        struct cmsghdr h;
        char buf[CMSG_SPACE(sizeof(int))];
    } c;
    struct msghdr m = {.msg_iov = iov, .msg_iovlen = 2};
    if (attach >= 0) {
        m.msg_control = c.buf;
        m.msg_controllen = sizeof c.buf;
        struct cmsghdr *h = CMSG_FIRSTHDR(&m);
        h->cmsg_level = SOL_SOCKET;
        h->cmsg_type = SCM_RIGHTS;
        h->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(h), &attach, sizeof(int));
    }
    return sendmsg(fd, &m, MSG_NOSIGNAL) == (ssize_t)(n + 5) ? 0 : -1;
}

static int read_full(int fd, char *buf, size_t n) { /* plain reads: any descriptors sent along are dropped */
    for (size_t got = 0; got < n;) {
        ssize_t r = read(fd, buf + got, n - got);
        if (r <= 0) {
            if (r < 0 && errno == EINTR) continue;
            return -1;
        }
        got += (size_t)r;
    }
    return 0;
}

static int make_memfd(const char *name) {
    int fd = (int)syscall(SYS_memfd_create, name, 1 /* MFD_CLOEXEC */);
    if (fd < 0) die("memfd_create");
    return fd;
}

static int write_full(int fd, const char *buf, size_t n) {
    for (size_t done = 0; done < n;) {
        ssize_t w = write(fd, buf + done, n - done);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        done += (size_t)w;
    }
    return 0;
}

#include "holdjson.c"
#include "holdrun.c"
#include "holdsup.c"

/* -- handing over to the Python agent ---------------------------------------------------- */

static void inherit(int fd) {
    if (fd >= 0 && fcntl(fd, F_SETFD, 0) < 0) die("fcntl");
}

/* Exec the Python agent in this process's place, handing over CONN (-1: none) with what was read
 * of it (PENDING) and, for an exec, its stdin descriptor (STDIN_FD), and the runs alive here. */
static void wake(int conn, const char *pending, size_t plen, int stdin_fd) {
    int pend = -1, alive_runs = -1;
    if (conn >= 0) {
        pend = make_memfd("hutch-pending");
        if (write_full(pend, pending, plen) < 0) die("write");
    }
    prune_runs();
    if (nruns) { /* the agent takes over these runs' supervisors (its children: kill, runs, going back lean) */
        alive_runs = make_memfd("hutch-runs");
        for (int i = 0; i < nruns; i++) dprintf(alive_runs, "%s %d\n", runs[i].id, (int)runs[i].pid);
    }
    if (state_fd < 0) state_fd = make_memfd("hutch-state");
    int fds[] = {agent_fd, exec_fd, state_fd, conn, pend, listener_fd, stdin_fd, alive_runs};
    char held[200];
    snprintf(held, sizeof held, "--held=%d,%d,%d,%d,%d,%d,%d,%d", fds[0], fds[1], fds[2], fds[3], fds[4], fds[5], fds[6], fds[7]);
    for (size_t i = 0; i < sizeof fds / sizeof *fds; i++) inherit(fds[i]);
    int n = 0;
    while (python[n]) n++;
    char **argv = calloc((size_t)n + 4, sizeof *argv);
    if (!argv) die("calloc");
    memcpy(argv, python, (size_t)n * sizeof *argv);
    argv[n] = (char *)sock_path;
    argv[n + 1] = "-1";
    argv[n + 2] = held;
    execve(argv[0], argv, environ);
    die(argv[0]);
}

static void free_run(struct run *r) {
    for (char **a = r->argv; a && *a; a++) free(*a);
    for (char **e = r->env; e && *e; e++) free(*e);
    for (size_t i = 0; i < r->nsecrets; i++) free(r->secret[i]), free(r->mark[i]);
    free(r->argv), free(r->env), free(r->cwd), free(r->secret), free(r->mark), free(r->secret_len);
}

/* A connection on exec.sock: the run, supervised by a fork of this helper when it can be (see
 * holdrun.c), else the Python agent's (woken with the connection and what was read of it). */
static void take_run(void) {
    int conn = accept4(exec_fd, NULL, NULL, SOCK_CLOEXEC), in = -1;
    if (conn < 0) return;
    struct timeval tv = {10, 0}; /* the daemon sends its request at once */
    setsockopt(conn, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    unsigned char head[5];
    union {
        struct cmsghdr h;
        char buf[CMSG_SPACE(8 * sizeof(int))];
    } c;
    struct iovec iov = {head, 5};
    struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = c.buf, .msg_controllen = sizeof c.buf};
    ssize_t got = recvmsg(conn, &m, MSG_CMSG_CLOEXEC | MSG_WAITALL);
    for (struct cmsghdr *h = got > 0 ? CMSG_FIRSTHDR(&m) : NULL; h; h = CMSG_NXTHDR(&m, h)) {
        if (h->cmsg_level != SOL_SOCKET || h->cmsg_type != SCM_RIGHTS) continue;
        int *fds = (int *)CMSG_DATA(h);
        for (size_t i = 0; i < (h->cmsg_len - CMSG_LEN(0)) / sizeof(int); i++) {
            if (in < 0) in = fds[i];
            else close(fds[i]);
        }
    }
    size_t size = got == 5 ? (size_t)head[0] << 24 | head[1] << 16 | head[2] << 8 | head[3] : 0;
    char *frame = got == 5 && size <= MAX_FRAME && head[4] == 'J' ? malloc(size + 5) : NULL;
    if (!frame || in < 0 || read_full(conn, frame + 5, size) < 0) { /* not a request: the agent would refuse it too */
        send_msg(conn, "{\"type\":\"error\",\"error\":{\"kind\":\"invalid\",\"message\":\"the exec socket takes exec requests "
                       "with a run id and a stdin descriptor\"}}", -1);
        free(frame);
        if (in >= 0) close(in);
        close(conn);
        return;
    }
    memcpy(frame, head, 5);
    struct run r;
    if (read_run(frame + 5, size, &r) < 0) wake(conn, frame, size + 5, in); /* never returns */
    prune_runs();
    pid_t pid = nruns < MAX_RUNS ? fork() : -1;
    if (pid == 0) {
        int own[] = {agent_fd, exec_fd, state_fd, listener_fd};
        for (int i = 0; i < 4; i++)
            if (own[i] >= 0) close(own[i]);
        supervise(&r, conn, in); /* never returns */
    }
    if (pid < 0) {
        send_msg(conn, "{\"type\":\"error\",\"error\":{\"kind\":\"capacity\",\"message\":\"cannot start a process: the sandbox is at "
                       "its pids limit\",\"hint\":\"kill runaway processes, or recreate the sandbox with a higher --pids\"}}", -1);
    } else {
        snprintf(runs[nruns].id, sizeof runs[nruns].id, "%s", r.id);
        runs[nruns++].pid = pid;
    }
    free_run(&r);
    free(frame);
    close(in);
    close(conn);
}

/* -- the requests an idle sandbox gets ---------------------------------------------------- */

static int do_listen(int conn, const char *body, size_t len) { /* 0: answered; -1: the agent's to answer */
    const char *v;
    size_t vlen;
    if (find_key(body, len, "forward", &v, &vlen) != 0 || find_key(body, len, "port", &v, &vlen) != 1) return -1;
    char num[16];
    if (vlen == 0 || vlen >= sizeof num) return -1;
    memcpy(num, v, vlen);
    num[vlen] = 0;
    char *end;
    long port = strtol(num, &end, 10);
    if (*end || port <= 0 || port > 65535) return -1;
    if (listener_fd < 0) {
        int one = 1, fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((unsigned short)port)};
        sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        if (fd < 0) return -1;
        if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) < 0 || bind(fd, (struct sockaddr *)&sa, sizeof sa) < 0 ||
            listen(fd, 256) < 0) {
            close(fd);
            return -1;
        }
        listener_fd = fd; /* kept: the port stays the proxy's while the daemon restarts */
    }
    send_msg(conn, "{\"type\":\"ok\"}", listener_fd);
    return 0;
}

static int kill_request(int conn, const char *body, size_t len) { /* 0: answered; -1: the agent's to answer */
    const char *v;
    size_t vl;
    double sig = SIGKILL;
    if (find_key(body, len, "run_id", &v, &vl) != 1) return -1;
    char *id = json_str(v, vl, NULL);
    int fine = id && !strncmp(id, "run_", 4) && strlen(id) < sizeof runs[0].id && !strchr(id, '/') &&
               (find_key(body, len, "signal", &v, &vl) != 1 || (json_num(v, vl, SIGKILL, &sig) == 0 && sig >= 1 && sig <= 64));
    if (fine)
        send_msg(conn, kill_run(id, (int)sig) ? "{\"type\":\"ok\",\"was_running\":true}" : "{\"type\":\"ok\",\"was_running\":false}", -1);
    free(id);
    return fine ? 0 : -1;
}

static void request(int conn) {
    struct timeval tv = {10, 0}; /* the daemon sends its request at once */
    setsockopt(conn, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    unsigned char head[5];
    if (read_full(conn, (char *)head, 5) < 0) return;
    size_t size = (size_t)head[0] << 24 | head[1] << 16 | head[2] << 8 | head[3];
    if (size > MAX_FRAME || head[4] != 'J') return;
    char *frame = mmap(NULL, size + 5, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (frame == MAP_FAILED) return;
    memcpy(frame, head, 5);
    const char *type, *body = frame + 5;
    size_t tlen;
    char reply[64];
    if (read_full(conn, frame + 5, size) == 0 && find_key(body, size, "type", &type, &tlen) == 1) {
        if (is(type, tlen, "ping")) {
            snprintf(reply, sizeof reply, "{\"type\":\"ok\",\"pid\":%d,\"protocol\":%s}", (int)getpid(), protocol);
            send_msg(conn, reply, -1);
        } else if (is(type, tlen, "runs")) {
            struct buf b = {0};
            prune_runs();
            putf(&b, "{\"type\":\"ok\",\"alive\":[");
            for (int i = 0; i < nruns; i++) putf(&b, "%s\"%s\"", i ? "," : "", runs[i].id);
            put(&b, "]}", 3);
            send_msg(conn, b.p, -1);
            free(b.p);
        } else if (is(type, tlen, "kill") && kill_request(conn, body, size) == 0) {
        } else if (is(type, tlen, "unlisten")) {
            if (listener_fd >= 0) close(listener_fd);
            listener_fd = -1;
            send_msg(conn, "{\"type\":\"ok\"}", -1);
        } else if (is(type, tlen, "configure") && state_size + (long)size + 5 <= MAX_STATE) {
            if (state_fd < 0) state_fd = make_memfd("hutch-state");
            if (write_full(state_fd, frame, size + 5) < 0) die("write");
            state_size += (long)size + 5;
            configured(body, size);
            send_msg(conn, "{\"type\":\"ok\"}", -1);
        } else if (!(is(type, tlen, "listen") && do_listen(conn, body, size) == 0)) {
            wake(conn, frame, size + 5, -1); /* never returns */
        }
    }
    munmap(frame, size + 5);
}

static void become(const char *spec) { /* --user=UID:GID[:GROUP...]: groups, then gid, then uid */
    size_t n = 1;
    for (const char *p = spec; *p; p++) n += *p == ':';
    long *ids = calloc(n, sizeof *ids);
    gid_t *groups = calloc(n, sizeof *groups);
    if (!ids || !groups || n < 2) die("--user");
    const char *p = spec;
    for (size_t i = 0; i < n; i++) {
        char *end;
        errno = 0;
        ids[i] = strtol(p, &end, 10);
        if (errno || end == p || (*end && *end != ':')) die("--user");
        p = end + (*end == ':');
        if (i >= 2) groups[i - 2] = (gid_t)ids[i];
    }
    if (setgroups(n - 2, groups) < 0 || setresgid((gid_t)ids[1], (gid_t)ids[1], (gid_t)ids[1]) < 0 ||
        setresuid((uid_t)ids[0], (uid_t)ids[0], (uid_t)ids[0]) < 0)
        die("--user");
    free(ids);
    free(groups);
}

#ifndef SYS_clone3
#define SYS_clone3 435 /* the same number on every architecture */
#endif
#ifndef SYS_close_range
#define SYS_close_range 436
#endif
#define HOLD_CLONE_INTO_CGROUP 0x200000000ULL
struct hold_clone_args { /* struct clone_args of linux/sched.h (5.7+), up to its cgroup field */
    unsigned long long flags, pidfd, child_tid, parent_tid, exit_signal, stack, stack_size, tls, set_tid, set_tid_size, cgroup;
};

static int join(const char *file) { /* 0: "the writer" (one thread here: the whole process) */
    int fd = open(file, O_WRONLY | O_CLOEXEC);
    int ok = fd >= 0 && write(fd, "0\n", 2) == 2;
    int err = errno;
    if (fd >= 0) close(fd);
    if (!ok) dprintf(2, "hutch launch: cannot join the cgroup %s: %s\n", file, strerror(err));
    return ok ? 0 : -1;
}

/* --into=DIR (a v2 cgroup): COMMAND starts in it by clone3(CLONE_INTO_CGROUP), which takes no
 * global lock (a cgroup.procs write waits out an RCU grace period: 4-9 ms); this launcher stays
 * its parent (as the uid it drops to), holds no descriptor of it, and exits as it does. Where
 * clone3 fails (an older kernel, a seccomp profile), it joins DIR/cgroup.procs itself. Returns
 * in the child (or, having joined, in this process). */
static int start_in(const char *dir, const char *user) {
    int cfd = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (cfd < 0) {
        dprintf(2, "hutch launch: cannot join the cgroup %s: %s\n", dir, strerror(errno));
        return -1;
    }
    struct hold_clone_args ca = {.flags = HOLD_CLONE_INTO_CGROUP, .exit_signal = SIGCHLD, .cgroup = (unsigned long long)cfd};
    long pid = syscall(SYS_clone3, &ca, sizeof ca);
    close(cfd);
    if (pid < 0) { /* no clone3 (ENOSYS, also what container seccomp profiles answer), or not allowed */
        char file[4096];
        snprintf(file, sizeof file, "%s/cgroup.procs", dir);
        return join(file); /* says why when that fails too */
    }
    if (pid == 0) return 0;
    if (syscall(SYS_close_range, 3, ~0U, 0) < 0) /* the child's pipes end when it does */
        for (long fd = 3, top = sysconf(_SC_OPEN_MAX); fd < top; fd++) close((int)fd);
    if (user) become(user);
    int status;
    while (waitpid((pid_t)pid, &status, 0) < 0)
        if (errno != EINTR) _exit(125);
    _exit(WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
}

static int launch(int argc, char **argv) {
    const char *user = NULL, *into = NULL;
    int i = 2;
    for (; i < argc && strcmp(argv[i], "--"); i++) {
        if (!strncmp(argv[i], "--procs=", 8)) {
            if (join(argv[i] + 8) < 0) return 125;
        } else if (!strncmp(argv[i], "--into=", 7)) {
            into = argv[i] + 7;
        } else if (!strncmp(argv[i], "--user=", 7)) {
            user = argv[i] + 7;
        } else if (strncmp(argv[i], "--rlimit=", 9)) {
            dprintf(2, "hutch launch: unknown option %s\n", argv[i]);
            return 125;
        }
    }
    if (i + 1 >= argc) {
        dprintf(2, "hutch launch: no command after --\n");
        return 125;
    }
    if (into && start_in(into, user) < 0) return 125;
    if (user) become(user); /* exits 1 on failure: said on stderr */
    for (int k = 2; k < i; k++) {
        if (strncmp(argv[k], "--rlimit=", 9)) continue;
        int resource;
        unsigned long long value;
        if (sscanf(argv[k] + 9, "%d:%llu", &resource, &value) != 2) {
            dprintf(2, "hutch launch: %s: not RESOURCE:VALUE\n", argv[k]);
            return 125;
        }
        struct rlimit rl = {(rlim_t)value, (rlim_t)value};
        if (setrlimit(resource, &rl) < 0) {
            dprintf(2, "hutch launch: rlimit %d: %s\n", resource, strerror(errno));
            return 125;
        }
    }
    execv(argv[i + 1], argv + i + 1);
    dprintf(2, "hutch launch: %s: %s\n", argv[i + 1], strerror(errno));
    return 125;
}

int main(int argc, char **argv) {
    if (argc == 2 && !strcmp(argv[1], "--check")) {
        printf("hutch-hold %s\n", HOLD_KEY);
        return 0;
    }
    if (argc >= 2 && !strcmp(argv[1], "--launch")) return launch(argc, argv);
    if (argc < 6) {
        dprintf(2, "usage: hold PROTOCOL SOCKET READY_FD [--user=...] [--held=...] -- PYTHON...\n");
        return 2;
    }
    protocol = argv[1];
    sock_path = argv[2];
    int ready = atoi(argv[3]), i = 4;
    const char *held = NULL;
    for (; i < argc && strcmp(argv[i], "--"); i++) {
        if (!strncmp(argv[i], "--user=", 7)) become(argv[i] + 7);
        else if (!strncmp(argv[i], "--held=", 7)) held = argv[i] + 7;
    }
    if (i + 1 >= argc) die("no agent command after --");
    python = argv + i + 1;
    umask(022);
    for (int sig = 1; sig < 65; sig++) { /* what this helper was started with ignored, once: a run's command starts without */
        struct sigaction sa;
        if (sigaction(sig, NULL, &sa) == 0 && sa.sa_handler == SIG_IGN) ignored |= 1ULL << (sig - 1);
    }
    ignored |= 1ULL << (SIGCHLD - 1) | 1ULL << (SIGPIPE - 1); /* this helper's own, and its supervisors' */
    signal(SIGCHLD, SIG_IGN); /* the runs' supervisors are reaped by the kernel (as the agent's are) */
    if (held) { /* back from the Python agent: its sockets, state and listener */
        if (sscanf(held, "%d,%d,%d,%d", &agent_fd, &exec_fd, &state_fd, &listener_fd) != 4) die("--held");
        int fds[] = {agent_fd, exec_fd, state_fd, listener_fd};
        for (int k = 0; k < 4; k++)
            if (fds[k] >= 0) fcntl(fds[k], F_SETFD, FD_CLOEXEC);
        state_size = state_fd >= 0 ? lseek(state_fd, 0, SEEK_END) : 0;
        char *state = state_size > 0 ? malloc((size_t)state_size) : NULL;
        if (state && pread(state_fd, state, (size_t)state_size, 0) == state_size) { /* its configure frames */
            for (long at = 0; at + 5 <= state_size;) {
                unsigned char *h = (unsigned char *)state + at;
                long size = (long)h[0] << 24 | h[1] << 16 | h[2] << 8 | h[3];
                if (at + 5 + size > state_size) break;
                configured(state + at + 5, (size_t)size);
                at += 5 + size;
            }
        }
        free(state);
    } else {
        char exec_path[sizeof ((struct sockaddr_un *)0)->sun_path];
        const char *slash = strrchr(sock_path, '/');
        int dir = slash ? (int)(slash - sock_path) + 1 : 0;
        snprintf(exec_path, sizeof exec_path, "%.*sexec.sock", dir, sock_path);
        agent_fd = listen_unix(sock_path);
        exec_fd = listen_unix(exec_path);
    }
    fcntl(agent_fd, F_SETFL, fcntl(agent_fd, F_GETFL) | O_NONBLOCK);
    if (ready >= 0) {
        if (write(ready, "ready\n", 6) != 6) die("ready");
        close(ready);
    }
    for (;;) {
        struct pollfd p[2] = {{agent_fd, POLLIN, 0}, {exec_fd, POLLIN, 0}};
        if (poll(p, 2, -1) < 0) {
            if (errno == EINTR) continue;
            die("poll");
        }
        if (p[1].revents) take_run();
        if (p[0].revents) {
            int conn = accept4(agent_fd, NULL, NULL, SOCK_CLOEXEC);
            if (conn >= 0) {
                request(conn);
                close(conn);
            }
        }
    }
}
