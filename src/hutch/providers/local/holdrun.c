/* holdrun.c: a run the idle helper supervises itself (included by hold.c; libc only).
 *
 * An exec the helper can do exactly as the Python agent's supervisor does (agent/supervisor.py:
 * the same frames, files, timeouts and statuses) no longer wakes the agent: the helper forks a
 * supervisor of its own, which owns the run to its end. Those are runs with no terminal and no
 * --user: the runs of a build or a test, and the E2B API's commands (input, no terminal). Any other run, or a request this does not fully understand, wakes
 * the Python agent as before and is handed to it unread.
 */

#define RUNS_DIR "/.hutch/runs"
#define PIPE_SIZE (1 << 18)
#define SEND_BUFFER (1 << 20)
#define GRACE 0.25 /* after the command exits, how long its descendants may hold the pipes */
#define MAX_RUNS 4096

struct run {
    char id[96];
    char **argv, **env, *cwd;
    size_t envc;
    double timeout, idle; /* 0: none */
    int stream, interactive; /* interactive: input arrives as I frames (a pipe this supervisor feeds) */
    double live_limit, disk_cap; /* live_limit < 0: all of it */
    char **secret, **mark;        /* what redaction replaces (values of MIN_REDACT bytes or more, longest first) */
    size_t *secret_len, nsecrets; /* and with what ([redacted:NAME]) */
};

static struct {
    char id[96];
    pid_t pid;
} runs[MAX_RUNS];
static int nruns;
static char *cfg_env, *cfg_secrets; /* the last configure's env and secrets, raw JSON (NULL: none) */

static double clock_of(clockid_t which) {
    struct timespec ts;
    clock_gettime(which, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* -- what the sandbox was configured with ----------------------------------------------- */

static void keep_raw(char **where, const char *v, size_t len) {
    free(*where);
    *where = malloc(len + 1);
    if (!*where) die("malloc");
    memcpy(*where, v, len);
    (*where)[len] = 0;
}

static void configured(const char *body, size_t len) { /* a configure frame's body: env replaces, secrets when given */
    const char *v;
    size_t vl;
    if (find_key(body, len, "env", &v, &vl) == 1) keep_raw(&cfg_env, v, vl);
    else keep_raw(&cfg_env, "{}", 2);
    if (find_key(body, len, "secrets", &v, &vl) == 1) keep_raw(&cfg_secrets, v, vl);
}

/* -- reading an exec request ------------------------------------------------------------ */

/* Each NAME: VALUE of a raw JSON object of strings (NULL or null: none), decoded, to FN (which
 * borrows them); 0 on success, -1 when one is not a string or FN refuses it. */
static int each_string(struct run *r, const char *raw, int (*fn)(struct run *, const char *, size_t, const char *, size_t)) {
    if (!raw || is_null(raw, strlen(raw))) return 0;
    const char *p = raw, *e = raw + strlen(raw), *k, *v;
    size_t kl, vl, nk, nv;
    int got;
    while ((got = json_next(&p, e, 1, &k, &kl, &v, &vl)) == 1) {
        char *key = json_str(k, kl, &nk), *val = json_str(v, vl, &nv);
        int fine = key && val && fn(r, key, nk, val, nv) == 0;
        free(key), free(val);
        if (!fine) return -1;
    }
    return got == 0 ? 0 : -1;
}

static int env_entry(struct run *r, const char *key, size_t nk, const char *val, size_t nv) { /* over one before */
    char *entry = nk && !strchr(key, '=') ? malloc(nk + nv + 2) : NULL;
    if (!entry) return -1;
    sprintf(entry, "%s=%s", key, val);
    size_t i = 0;
    while (i < r->envc && strncmp(r->env[i], entry, nk + 1)) i++;
    if (i == r->envc) {
        char **grown = realloc(r->env, (r->envc + 2) * sizeof *grown);
        if (!grown) return free(entry), -1;
        r->env = grown;
        r->envc++;
    } else {
        free(r->env[i]);
    }
    r->env[i] = entry;
    r->env[r->envc] = NULL;
    return 0;
}

#define MIN_REDACT 4 /* shorter secret values are not searched for in output (agent/output.py) */

/* A secret NAME: VALUE (a name given again replaces its value in place, as a Python dict merge does). */
static int secret_entry(struct run *r, const char *name, size_t nn, const char *value, size_t nv) {
    char *mark = malloc(nn + 12), *copy = malloc(nv + 1);
    if (!mark || !copy) return free(mark), free(copy), -1;
    sprintf(mark, "[redacted:%s]", name);
    memcpy(copy, value, nv + 1);
    size_t i = 0;
    while (i < r->nsecrets && strcmp(r->mark[i], mark)) i++;
    if (i == r->nsecrets) {
        char **s = realloc(r->secret, (i + 1) * sizeof *s), **m = s ? realloc(r->mark, (i + 1) * sizeof *m) : NULL;
        size_t *l = m ? realloc(r->secret_len, (i + 1) * sizeof *l) : NULL;
        if (s) r->secret = s;
        if (m) r->mark = m;
        if (!l) return free(mark), free(copy), -1;
        r->secret_len = l;
        r->nsecrets++;
    } else {
        free(r->secret[i]), free(r->mark[i]);
    }
    r->secret[i] = copy, r->mark[i] = mark, r->secret_len[i] = nv;
    return 0;
}

static int sort_secrets(struct run *r) { /* drop the short ones; the longest first, ties in order (a stable sort) */
    size_t kept = 0;
    for (size_t i = 0; i < r->nsecrets; i++) {
        if (r->secret_len[i] < MIN_REDACT) {
            free(r->secret[i]), free(r->mark[i]);
            continue;
        }
        char *s = r->secret[i], *m = r->mark[i];
        size_t len = r->secret_len[i], at = kept++;
        for (; at > 0 && r->secret_len[at - 1] < len; at--)
            r->secret[at] = r->secret[at - 1], r->mark[at] = r->mark[at - 1], r->secret_len[at] = r->secret_len[at - 1];
        r->secret[at] = s, r->mark[at] = m, r->secret_len[at] = len;
    }
    r->nsecrets = kept;
    return 0;
}

/* The run in an exec request BODY, when this helper can run it as the Python agent would: 0, or
 * -1 (hand it to the Python agent). */
static int read_run(const char *body, size_t len, struct run *r) {
    memset(r, 0, sizeof *r);
    r->stream = 1, r->live_limit = -1, r->disk_cap = 64 << 20;
    const char *p = body, *e = body + len, *k, *v, *env = NULL, *redact = NULL;
    size_t kl, vl, envl = 0, redactl = 0;
    int got, flag;
    char *s;
    while ((got = json_next(&p, e, 1, &k, &kl, &v, &vl)) == 1) {
        if (is(k, kl, "type")) {
            if (!is(v, vl, "exec")) return -1;
        } else if (is(k, kl, "run_id")) {
            if (!(s = json_str(v, vl, NULL))) return -1;
            size_t n = strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-");
            int fine = !strncmp(s, "run_", 4) && !s[n] && n < sizeof r->id;
            if (fine) strcpy(r->id, s);
            free(s);
            if (!fine) return -1;
        } else if (is(k, kl, "argv")) {
            const char *q = v, *qe = v + vl, *x;
            size_t xl, n = 0;
            while ((got = json_next(&q, qe, 0, NULL, NULL, &x, &xl)) == 1) {
                char **grown = realloc(r->argv, (n + 2) * sizeof *grown);
                if (!grown || !(grown[n] = json_str(x, xl, NULL))) return -1;
                r->argv = grown;
                r->argv[++n] = NULL;
            }
            if (got < 0 || n == 0) return -1;
        } else if (is(k, kl, "env")) {
            env = v, envl = vl;
        } else if (is(k, kl, "redact")) {
            redact = v, redactl = vl;
        } else if (is(k, kl, "cwd")) {
            if (!is_null(v, vl) && !(r->cwd = json_str(v, vl, NULL))) return -1;
        } else if (is(k, kl, "timeout") || is(k, kl, "idle_timeout")) {
            if (json_num(v, vl, 0, is(k, kl, "timeout") ? &r->timeout : &r->idle) < 0) return -1;
        } else if (is(k, kl, "stream")) {
            if (json_bool(v, vl, 1, &r->stream) < 0) return -1;
        } else if (is(k, kl, "live_limit") || is(k, kl, "disk_cap")) {
            if (json_num(v, vl, -1, is(k, kl, "live_limit") ? &r->live_limit : &r->disk_cap) < 0) return -1;
        } else if (is(k, kl, "interactive")) {
            if (json_bool(v, vl, 0, &r->interactive) < 0) return -1;
        } else if (is(k, kl, "tty")) {
            if (json_bool(v, vl, 0, &flag) < 0 || flag) return -1; /* a terminal: the Python agent's */
        } else if (!is(k, kl, "rows") && !is(k, kl, "cols") && !(is(k, kl, "user") && is_null(v, vl))) {
            return -1; /* --user, or a field this helper does not know */
        }
    }
    if (got < 0 || !r->id[0] || !r->argv || r->timeout < 0 || r->idle < 0 || r->disk_cap < 0) return -1;
    if (!redact) return -1; /* (the daemon always says) */
    if (!is_null(redact, redactl)) { /* the sandbox's secrets, then the run's (by name, over them) */
        char *raw = malloc(redactl + 1);
        if (!raw) return -1;
        memcpy(raw, redact, redactl);
        raw[redactl] = 0;
        int bad = each_string(r, cfg_secrets, secret_entry) < 0 || each_string(r, raw, secret_entry) < 0;
        free(raw);
        if (bad || sort_secrets(r) < 0) return -1;
    }
    char *own = env ? malloc(envl + 1) : NULL;
    if (own) memcpy(own, env, envl), own[envl] = 0;
    int bad = each_string(r, cfg_env, env_entry) < 0 || each_string(r, cfg_secrets, env_entry) < 0 ||
              (env && (!own || each_string(r, own, env_entry) < 0));
    free(own);
    if (!r->env && !bad) r->env = calloc(1, sizeof *r->env);
    return bad || !r->env ? -1 : 0;
}

/* -- processes: descendants and their signals ------------------------------------------- */

/* Signal every live descendant of ROOT (read from this sandbox's /proc); how many there were. */
static int signal_tree(pid_t root, int sig) {
    static pid_t pid[1 << 16], ppid[1 << 16];
    int n = 0, found = 0;
    DIR *d = opendir("/proc");
    if (!d) return 0;
    for (struct dirent *de; (de = readdir(d)) && n < (1 << 16);) {
        if (de->d_name[0] < '1' || de->d_name[0] > '9') continue;
        char path[64], stat[512];
        snprintf(path, sizeof path, "/proc/%s/stat", de->d_name);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0) continue;
        ssize_t got = read(fd, stat, sizeof stat - 1);
        close(fd);
        char *paren = got > 0 ? (stat[got] = 0, strrchr(stat, ')')) : NULL;
        char state;
        int parent;
        if (!paren || sscanf(paren + 1, " %c %d", &state, &parent) != 2 || state == 'Z' || state == 'X') continue;
        pid[n] = atoi(de->d_name), ppid[n++] = parent;
    }
    closedir(d);
    pid_t todo[1 << 10];
    int top = 0;
    todo[top++] = root;
    while (top) {
        pid_t at = todo[--top];
        for (int i = 0; i < n; i++) {
            if (ppid[i] != at) continue;
            kill(pid[i], sig);
            found++;
            if (top < (int)(sizeof todo / sizeof *todo)) todo[top++] = pid[i];
        }
    }
    return found;
}

static pid_t run_pid; /* in a run's supervisor: the command, and its wait status once reaped */
static int run_status, run_reaped;

static void reap(void) { /* a supervisor's ended children (orphans it inherited too), keeping the command's status */
    int status;
    for (pid_t pid; (pid = waitpid(-1, &status, WNOHANG)) > 0;)
        if (pid == run_pid) run_status = status, run_reaped = 1;
}

static void kill_tree(pid_t root, int sig) { /* with SIGKILL, again until none is left */
    for (int i = 0; i < 200 && signal_tree(root, sig) && sig == SIGKILL; i++) {
        if (root == getpid()) reap();
        usleep(2000);
    }
}

static int alive(pid_t pid) { return kill(pid, 0) == 0 || errno == EPERM; }

static void run_path(char *out, size_t size, const char *id, const char *name) {
    snprintf(out, size, name ? "%s/%s/%s" : "%s/%s", RUNS_DIR, id, name);
}

/* kill RUN_ID: mark it killed, signal its tree; whether it was running (or not here yet). */
static int kill_run(const char *id, int sig) {
    pid_t pid = 0;
    for (int i = 0; i < nruns; i++)
        if (!strcmp(runs[i].id, id)) pid = runs[i].pid;
    char path[256];
    run_path(path, sizeof path, id, "status");
    int running = pid && alive(pid), ahead = !pid && access(path, F_OK) != 0;
    if (running || ahead) { /* as the agent's kill (server.py): a supervisor not started yet finds the mark */
        run_path(path, sizeof path, id, NULL);
        mkdir(path, 0755);
        run_path(path, sizeof path, id, "killed");
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (fd < 0) ahead = 0;
        else dprintf(fd, "%d", sig), close(fd);
    }
    if (running) kill_tree(pid, sig);
    return running || ahead;
}

static void prune_runs(void) {
    int kept = 0;
    for (int i = 0; i < nruns; i++)
        if (alive(runs[i].pid)) runs[kept++] = runs[i];
    nruns = kept;
}
