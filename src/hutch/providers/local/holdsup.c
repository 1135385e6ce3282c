/* holdsup.c: the supervisor of a run the idle helper took (included by hold.c; libc only).
 *
 * agent/supervisor.py in C, for the runs holdrun.c takes (no terminal, no --user): STARTING -> RUNNING -> DRAINING -> FINISHED, the same frames to the daemon, the same
 * files under /.hutch/runs/RUN_ID, the wall and idle timeouts enforced here, the run going on
 * when the daemon goes away. A fork of the helper: about 0.1 MiB where a Python supervisor is 5.
 */

struct sink {
    const char *name;
    unsigned char kind; /* 'O' or 'E' */
    int r, fd;          /* the pipe's read end (-1: at its end); the file (-1: not opened, -2: cannot write) */
    long long total;
    const char *disk_error;
    struct buf held; /* redaction: the end of the output so far that could be the start of a secret */
};

#define INPUT_BUFFER (1 << 20) /* input held for the command before the daemon's frames stop being read */

static unsigned long long ignored; /* the signals a command would find ignored (inherited through exec): reset before it starts */
static struct buf sendq, input;  /* live output for the daemon; input for the command */
static int host = -1;           /* the daemon's connection (-1: gone) */
static int feed = -1, eof_asked; /* an interactive run's stdin pipe (-1: none, or closed) */
static char run_dir[192];

static void frame_to(struct buf *b, unsigned char kind, const void *data, size_t n) {
    unsigned char head[5] = {n >> 24, n >> 16, n >> 8, n, kind};
    put(b, head, 5);
    put(b, data, n);
}

static void host_gone(void) {
    if (host >= 0) close(host);
    host = -1;
    sendq.n = 0;
}

static void send_some(void) {
    ssize_t n = send(host, sendq.p, sendq.n < (1 << 16) ? sendq.n : (1 << 16), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
        memmove(sendq.p, sendq.p + n, sendq.n - (size_t)n);
        sendq.n -= (size_t)n;
    } else if (n < 0 && errno != EAGAIN && errno != EINTR) {
        host_gone();
    }
}

static void sink_write(struct sink *s, const char *data, size_t n, const struct run *r) {
    long long room = (long long)r->disk_cap - s->total;
    s->total += (long long)n;
    if (s->fd == -1) {
        mkdir(run_dir, 0755);
        char path[256];
        snprintf(path, sizeof path, "%s/%s", run_dir, s->name);
        s->fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
        if (s->fd < 0) s->fd = -2, s->disk_error = strerror(errno);
    }
    if (room <= 0 || s->fd < 0) return;
    size_t kept = (long long)n < room ? n : (size_t)room;
    if (write_full(s->fd, data, kept) < 0) {
        s->disk_error = strerror(errno);
        close(s->fd);
        s->fd = -2;
        return;
    }
    static int transcript = -1;
    if (transcript == -1) transcript = open(RUNS_DIR "/transcript", O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    if (transcript >= 0) { /* one write per record: concurrent runs' records never interleave */
        char head[128];
        int hl = snprintf(head, sizeof head, "%s %c %08zx\n", r->id, s->name[3], kept);
        struct iovec iov[2] = {{head, (size_t)hl}, {(void *)data, kept}};
        if (writev(transcript, iov, 2) < 0) {
        }
    }
}

static int ends_with(const char *buf, size_t n, const char *what, size_t k) { return n >= k && !memcmp(buf + n - k, what, k); }

/* Secret values in DATA (after what S held back) replaced by their marks, into OUT; the end that
 * could be the start of a secret is held back until the next read or the stream's end
 * (agent/output.py's Redactor, byte for byte). */
static void redact(const struct run *r, struct sink *s, const char *data, size_t n, struct buf *out) {
    struct buf work = {0}, next = {0};
    put(&work, s->held.p ? s->held.p : "", s->held.n);
    put(&work, data, n);
    s->held.n = 0;
    out->n = 0;
    if (!work.n) return;
    for (size_t i = 0; i < r->nsecrets; i++) {
        const char *at = work.p, *end = work.p + work.n, *hit;
        next.n = 0;
        while ((hit = memmem(at, (size_t)(end - at), r->secret[i], r->secret_len[i]))) {
            put(&next, at, (size_t)(hit - at));
            put(&next, r->mark[i], strlen(r->mark[i]));
            at = hit + r->secret_len[i];
        }
        put(&next, at, (size_t)(end - at));
        struct buf swap = work;
        work = next, next = swap;
    }
    size_t keep = 0;
    for (size_t i = 0; i < r->nsecrets; i++)
        for (size_t k = r->secret_len[i] - 1 < work.n ? r->secret_len[i] - 1 : work.n; k > keep; k--)
            if (ends_with(work.p, work.n, r->secret[i], k)) {
                keep = k;
                break;
            }
    put(&s->held, work.p + work.n - keep, keep);
    put(out, work.p, work.n - keep);
    free(work.p), free(next.p);
}

static void deliver(const struct run *r, struct sink *s, const char *data, size_t n) { /* to disk, and live */
    if (!n) return;
    sink_write(s, data, n, r);
    if (r->stream && host >= 0) {
        long long sent = s->total - (long long)n, live = (long long)n;
        if (r->live_limit >= 0) live = (long long)r->live_limit - sent < live ? (long long)r->live_limit - sent : live;
        if (live > 0) frame_to(&sendq, s->kind, data, (size_t)live);
    }
}

static void flush(const struct run *r, struct sink *s) { /* what redaction held back, at the stream's end */
    struct buf out = {0};
    put(&out, s->held.p ? s->held.p : "", s->held.n);
    s->held.n = 0;
    deliver(r, s, out.p, out.n);
    free(out.p);
}

/* Start the command: its pid, or 0 with *code and *why set (it could not start). */
static pid_t spawn_run(const struct run *r, int in, int out, int err, int *code, struct buf *why) {
    int report[2];
    if (pipe2(report, O_CLOEXEC) < 0) return *code = 126, putf(why, "cannot run %s: %s", r->argv[0], strerror(errno)), 0;
    const char *cwd = r->cwd ? r->cwd : "/workspace";
    pid_t pid = fork();
    if (pid == 0) {
        const char *step = "setup";
        if (dup2(in, 0) < 0 || dup2(out, 1) < 0 || dup2(err, 2) < 0) goto failed;
        step = "chdir";
        if (chdir(cwd) < 0) goto failed;
        step = "setup";
        sigset_t all;
        sigemptyset(&all);
        for (int sig = 1; sig < 65; sig++) /* (a handler is reset by exec itself) */
            if (ignored >> (sig - 1) & 1) signal(sig, SIG_DFL);
        sigprocmask(SIG_SETMASK, &all, NULL);
        if (setsid() < 0) goto failed;
        if (report[1] > 3) syscall(SYS_close_range, 3, report[1] - 1, 0);
        syscall(SYS_close_range, report[1] + 1, ~0U, 0);
        step = "exec";
        const char *prog = r->argv[0], *path = "/bin:/usr/bin";
        for (char **e = r->env; *e; e++)
            if (!strncmp(*e, "PATH=", 5)) path = *e + 5;
        int first = 0;
        if (strchr(prog, '/')) {
            execve(prog, r->argv, r->env);
            first = errno;
        } else {
            char full[4096];
            for (const char *d = path;; d++) {
                const char *end = strchrnul(d, ':');
                if (end == d) snprintf(full, sizeof full, "%s", prog);
                else snprintf(full, sizeof full, "%.*s/%s", (int)(end - d), d, prog);
                execve(full, r->argv, r->env);
                if (errno != ENOENT && errno != ENOTDIR) {
                    if (!first) first = errno;
                } else if (!first && !*end) {
                    first = errno;
                }
                if (!*end) break;
                d = end;
            }
        }
        errno = first ? first : ENOENT;
    failed:
        dprintf(report[1], "%d:%s", errno, step);
        _exit(127);
    }
    int saved = errno;
    close(report[1]);
    if (pid < 0) {
        close(report[0]);
        errno = saved;
        return *code = 126, putf(why, "cannot run %s: %s", r->argv[0], strerror(errno)), 0;
    }
    char got[64] = {0};
    ssize_t n, at = 0;
    while ((n = read(report[0], got + at, sizeof got - 1 - (size_t)at)) > 0 || (n < 0 && errno == EINTR)) at += n > 0 ? n : 0;
    close(report[0]);
    if (at == 0) return pid;
    waitpid(pid, NULL, 0);
    int number = atoi(got);
    const char *step = strchr(got, ':') ? strchr(got, ':') + 1 : "setup";
    char reason[128];
    snprintf(reason, sizeof reason, "%s", strerror(number ? number : EINVAL));
    for (char *c = reason; *c; c++) *c = (char)tolower((unsigned char)*c);
    const char *prog = r->argv[0];
    *code = 126;
    if (!strcmp(step, "chdir")) {
        if (number == ENOENT) putf(why, "working directory %s does not exist", cwd);
        else if (number == ENOTDIR) putf(why, "working directory %s is not a directory", cwd);
        else putf(why, "cannot enter working directory %s: %s", cwd, reason);
    } else if (!strcmp(step, "exec") && number == ENOENT) {
        char full[4096];
        snprintf(full, sizeof full, prog[0] == '/' ? "%.0s%s" : "%s/%s", cwd, prog);
        if (strchr(prog, '/') && access(full, F_OK) == 0) putf(why, "cannot run %s: its interpreter (the #! line) was not found", prog);
        else *code = 127, putf(why, "command not found: %s", prog);
    } else if (number == EACCES || number == EPERM) {
        putf(why, "cannot run %s: permission denied (not executable?)", prog);
    } else {
        putf(why, "cannot run %s: %s", prog, reason);
    }
    return 0;
}

/* The run's directory and its status file, made while the command starts (the file system's inode
 * work off the run's path: the command runs meanwhile); -1 when they could not be made (then again at the end). */
static int status_fd = -1;

static int open_status(void) {
    char tmp[256];
    snprintf(tmp, sizeof tmp, "%s/.status.tmp", run_dir);
    mkdir(run_dir, 0755);
    return open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
}

static void finish(const struct run *r, struct buf *status) { /* the status to disk, then the last words */
    put(status, "}", 1);
    char tmp[256], final[256];
    snprintf(tmp, sizeof tmp, "%s/.status.tmp", run_dir);
    snprintf(final, sizeof final, "%s/status", run_dir);
    int fd = status_fd >= 0 ? status_fd : open_status();
    status_fd = -1;
    if (fd >= 0) {
        int ok = write_full(fd, status->p, status->n) == 0;
        close(fd);
        if (ok) rename(tmp, final);
    }
    if (host < 0) return;
    frame_to(&sendq, 'J', status->p, status->n);
    int flags = fcntl(host, F_GETFL);
    fcntl(host, F_SETFL, flags & ~O_NONBLOCK);
    for (size_t at = 0; at < sendq.n;) { /* at the daemon's pace (it bounds the wait) */
        ssize_t n = send(host, sendq.p + at, sendq.n - at, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        at += (size_t)n;
    }
    (void)r;
}

static void status_head(struct buf *b, const struct run *r, double started, int code, int sig, const char *reason) {
    putf(b, "{\"type\":\"finished\",\"run_id\":\"%s\",\"started_at\":%.6f,\"exit\":%d,\"signal\":%d,\"reason\":", r->id, started, code, sig);
    if (reason) putf(b, "\"%s\"", reason);
    else put(b, "null", 4);
    putf(b, ",\"finished_at\":%.6f", clock_of(CLOCK_REALTIME));
}

static int killed_mark(void) { /* the signal a kill asked for (its mark in the run's directory), or 0 */
    char path[256], text[16] = {0};
    snprintf(path, sizeof path, "%s/killed", run_dir);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    ssize_t n = read(fd, text, sizeof text - 1);
    close(fd);
    int sig = n > 0 ? atoi(text) : 0;
    return sig > 0 ? sig : SIGKILL;
}

static void write_input(void) {
    ssize_t n = write(feed, input.p, input.n < (1 << 16) ? input.n : (1 << 16));
    if (n > 0) {
        memmove(input.p, input.p + n, input.n - (size_t)n);
        input.n -= (size_t)n;
    } else if (n < 0 && errno != EAGAIN && errno != EINTR) {
        input.n = 0; /* the command closed its input */
    }
}

static void on_message(const char *body, size_t len, const char **reason) {
    const char *v, *t;
    size_t vl, tl;
    if (find_key(body, len, "type", &t, &tl) != 1) return;
    if (is(t, tl, "eof")) {
        eof_asked = 1;
    } else if (is(t, tl, "hangup")) {
        kill_tree(getpid(), SIGHUP);
    } else if (is(t, tl, "signal") && find_key(body, len, "signal", &v, &vl) == 1) {
        double sig;
        if (json_num(v, vl, 0, &sig) < 0 || sig < 1 || sig > 64) return;
        if (!*reason) {
            static char why[32];
            char *given = find_key(body, len, "reason", &v, &vl) == 1 ? json_str(v, vl, NULL) : NULL;
            snprintf(why, sizeof why, "%s", given && *given && strlen(given) < sizeof why ? given : "killed");
            free(given);
            if (strspn(why, "abcdefghijklmnopqrstuvwxyz_") != strlen(why)) strcpy(why, "killed");
            *reason = why;
        }
        kill_tree(getpid(), (int)sig);
    }
}

/* The supervisor of run R (a fork of the helper): it never returns. */
static void supervise(const struct run *r, int conn, int in) {
    signal(SIGCHLD, SIG_DFL);
    signal(SIGPIPE, SIG_IGN);
    prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
    host = conn;
    fcntl(host, F_SETFL, fcntl(host, F_GETFL) | O_NONBLOCK);
    snprintf(run_dir, sizeof run_dir, "%s/%s", RUNS_DIR, r->id);
    double started = clock_of(CLOCK_REALTIME);
    struct sink sinks[2] = {{"stdout", 'O', -1, -1, 0, NULL, {0}}, {"stderr", 'E', -1, -1, 0, NULL, {0}}};
    int ends[2][2];
    struct buf status = {0}, why = {0};
    int code = 0;
    pid_t pid = 0;
    int stdin_pipe[2] = {-1, -1};
    if (pipe2(ends[0], O_CLOEXEC) == 0 && pipe2(ends[1], O_CLOEXEC) == 0 && (!r->interactive || pipe2(stdin_pipe, O_CLOEXEC) == 0)) {
        for (int i = 0; i < 2; i++) fcntl(ends[i][0], F_SETPIPE_SZ, PIPE_SIZE), sinks[i].r = ends[i][0];
        pid = spawn_run(r, r->interactive ? stdin_pipe[0] : in, ends[0][1], ends[1][1], &code, &why);
        close(ends[0][1]), close(ends[1][1]);
        if (r->interactive) {
            close(stdin_pipe[0]);
            feed = stdin_pipe[1];
            fcntl(feed, F_SETFL, fcntl(feed, F_GETFL) | O_NONBLOCK);
        }
    } else {
        code = 126, putf(&why, "cannot run %s: %s", r->argv[0], strerror(errno));
    }
    close(in);
    if (!pid) { /* it could not start */
        status_head(&status, r, started, code, 0, "spawn");
        putf(&status, ",\"stdout_bytes\":0,\"stderr_bytes\":0,\"truncated\":false,\"spawn_error\":");
        put(&why, "", 1);
        put_str(&status, why.p);
        finish(r, &status);
        _exit(0);
    }
    char started_msg[64];
    int sl = snprintf(started_msg, sizeof started_msg, "{\"type\":\"started\",\"pid\":%d}", (int)pid);
    frame_to(&sendq, 'J', started_msg, (size_t)sl);
    send_some();
    status_fd = open_status();
    run_pid = pid;
    int pidfd = (int)syscall(SYS_pidfd_open, pid, 0); /* -1 (an old kernel, gVisor): asked each turn */
    const char *reason = NULL;
    if (killed_mark()) reason = "killed", kill_tree(getpid(), killed_mark()); /* a kill that came first */
    double start = clock_of(CLOCK_MONOTONIC), last_output = start, exited_at = 0;
    double deadline = r->timeout > 0 ? start + r->timeout : 0;
    int running = 1, wstatus = 0;
    static char chunk[PIPE_SIZE];
    struct buf inbuf = {0}, redacted = {0};
    for (;;) {
        double now = clock_of(CLOCK_MONOTONIC);
        int held = host >= 0 && sendq.n >= SEND_BUFFER;
        if (held) last_output = now, exited_at = running ? exited_at : now;
        struct pollfd p[5];
        int n = 0, at_sink[2] = {-1, -1}, at_pid = -1, at_host = -1, at_feed = -1;
        for (int i = 0; i < 2; i++)
            if (sinks[i].r >= 0 && !held) at_sink[i] = n, p[n++] = (struct pollfd){sinks[i].r, POLLIN, 0};
        if (running && pidfd >= 0) at_pid = n, p[n++] = (struct pollfd){pidfd, POLLIN, 0};
        short want = (short)((input.n < INPUT_BUFFER ? POLLIN : 0) | (sendq.n ? POLLOUT : 0));
        if (host >= 0 && want) at_host = n, p[n++] = (struct pollfd){host, want, 0};
        if (feed >= 0 && input.n) at_feed = n, p[n++] = (struct pollfd){feed, POLLOUT, 0};
        double wait = 1.0;
        if (deadline && !reason && deadline - now < wait) wait = deadline - now;
        if (r->idle > 0 && !reason && last_output + r->idle - now < wait) wait = last_output + r->idle - now;
        if (!running && exited_at + GRACE - now < wait) wait = exited_at + GRACE - now;
        if (running && pidfd < 0 && wait > 0.02) wait = 0.02;
        if (poll(p, (nfds_t)n, wait > 0 ? (int)(wait * 1000) + 1 : 0) < 0 && errno != EINTR) _exit(1);
        if (at_host >= 0 && host >= 0 && (p[at_host].revents & POLLOUT)) send_some();
        if (at_feed >= 0 && p[at_feed].revents) write_input();
        for (int i = 0; i < 2; i++) {
            if (at_sink[i] < 0 || !p[at_sink[i]].revents) continue;
            ssize_t got = read(sinks[i].r, chunk, sizeof chunk);
            if (got < 0 && (errno == EINTR || errno == EAGAIN)) continue;
            if (got <= 0) {
                close(sinks[i].r);
                sinks[i].r = -1;
                flush(r, &sinks[i]);
                continue;
            }
            last_output = clock_of(CLOCK_MONOTONIC);
            if (r->nsecrets) {
                redact(r, &sinks[i], chunk, (size_t)got, &redacted);
                deliver(r, &sinks[i], redacted.p, redacted.n);
            } else {
                deliver(r, &sinks[i], chunk, (size_t)got);
            }
        }
        if (at_host >= 0 && host >= 0 && (p[at_host].revents & (POLLIN | POLLHUP | POLLERR))) {
            char in_chunk[1 << 16];
            ssize_t got = recv(host, in_chunk, sizeof in_chunk, MSG_DONTWAIT);
            if (got == 0 || (got < 0 && errno != EAGAIN && errno != EINTR)) {
                host_gone(); /* the run goes on, its output on disk; one still taking input hangs up with it */
                if (r->interactive && running && !eof_asked) kill_tree(getpid(), SIGHUP);
            } else if (got > 0) {
                put(&inbuf, in_chunk, (size_t)got);
                while (inbuf.n >= 5) {
                    unsigned char *h = (unsigned char *)inbuf.p;
                    size_t size = (size_t)h[0] << 24 | h[1] << 16 | h[2] << 8 | h[3];
                    if (size > MAX_FRAME || !strchr("JDOEI", h[4]) || !h[4]) {
                        host_gone(); /* not the protocol: as if the daemon went away */
                        if (r->interactive && running && !eof_asked) kill_tree(getpid(), SIGHUP);
                        break;
                    }
                    if (inbuf.n < size + 5) break;
                    if (h[4] == 'J') on_message(inbuf.p + 5, size, &reason);
                    else if (h[4] == 'I' && feed >= 0) put(&input, inbuf.p + 5, size);
                    memmove(inbuf.p, inbuf.p + size + 5, inbuf.n - size - 5);
                    inbuf.n -= size + 5;
                }
            }
        }
        if (feed >= 0 && eof_asked && !input.n) close(feed), feed = -1; /* all of it went in, no more is coming */
        now = clock_of(CLOCK_MONOTONIC);
        if (running) {
            siginfo_t info = {0};
            int gone = run_reaped || (at_pid >= 0 ? (p[at_pid].revents != 0)
                                                  : waitid(P_PID, (id_t)pid, &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info.si_pid == pid);
            if (gone) {
                while (!run_reaped && waitpid(pid, &run_status, 0) < 0 && errno == EINTR) {
                }
                wstatus = run_status, run_reaped = 1;
                running = 0, exited_at = now;
            }
        }
        if (running && !reason) {
            if (deadline && now >= deadline) reason = "timeout", kill_tree(getpid(), SIGKILL);
            else if (r->idle > 0 && now - last_output >= r->idle) reason = "idle_timeout", kill_tree(getpid(), SIGKILL);
        } else if (!running && (sinks[0].r >= 0 || sinks[1].r >= 0) && deadline && now >= deadline) {
            kill_tree(getpid(), SIGKILL); /* descendants still writing past the deadline */
        }
        if (!running && ((sinks[0].r < 0 && sinks[1].r < 0) || now >= exited_at + GRACE)) break;
    }
    for (int i = 0; i < 2; i++) flush(r, &sinks[i]); /* the end of a stream held back (descendants kept it open) */
    if (!reason && killed_mark()) reason = "killed";
    if (reason && strstr(reason, "timeout")) kill_tree(getpid(), SIGKILL);
    reap();
    int sig = WIFSIGNALED(wstatus) ? WTERMSIG(wstatus) : 0;
    status_head(&status, r, started, sig ? 128 + sig : WEXITSTATUS(wstatus), sig, reason);
    putf(&status, ",\"stdout_bytes\":%lld,\"stderr_bytes\":%lld,\"truncated\":%s,\"disk_error\":", sinks[0].total, sinks[1].total,
         sinks[0].total > (long long)r->disk_cap || sinks[1].total > (long long)r->disk_cap ? "true" : "false");
    const char *disk_error = sinks[0].disk_error ? sinks[0].disk_error : sinks[1].disk_error;
    if (disk_error) put_str(&status, disk_error);
    else put(&status, "null", 4);
    finish(r, &status);
    _exit(0);
}
