/* holdjson.c: the JSON the idle helper reads and writes (included by hold.c; libc only).
 *
 * Values are read as raw text (find_key, obj_next, arr_next) and decoded on demand: strings
 * (json_str, with Python's surrogate escapes \udc80-\udcff read back as the bytes they stand
 * for), numbers and booleans. Anything this does not expect makes the caller hand the request
 * to the Python agent, which reads all of JSON: a surprise costs speed, never correctness.
 */

static const char *skip_ws(const char *p, const char *e) {
    while (p < e && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')) p++;
    return p;
}

static const char *skip_string(const char *p, const char *e) { /* p at '"': after the closing quote, or NULL */
    for (p++; p < e; p++) {
        if (*p == '\\') p++;
        else if (*p == '"') return p + 1;
    }
    return NULL;
}

static const char *skip_value(const char *p, const char *e) {
    if (p < e && *p == '"') return skip_string(p, e);
    int depth = 0;
    while (p < e) {
        if (*p == '"') {
            if (!(p = skip_string(p, e))) return NULL;
            continue;
        }
        if (*p == '{' || *p == '[') depth++;
        else if (*p == '}' || *p == ']') {
            if (depth == 0) return p;
            if (--depth == 0) return p + 1;
        } else if (depth == 0 && (*p == ',' || *p == ' ' || *p == '\n')) return p;
        p++;
    }
    return depth ? NULL : p;
}

/* The next member of an object or element of an array, *pp at its '{' or '[' first, then where the
 * last call left it: 1 (key: raw, with its quotes; NULL for arrays), 0 at the end, -1 malformed. */
static int json_next(const char **pp, const char *e, int object, const char **k, size_t *klen, const char **v, size_t *vlen) {
    const char *p = skip_ws(*pp, e);
    if (p >= e) return -1;
    if (*p == (object ? '{' : '[')) {
        p = skip_ws(p + 1, e);
        if (p < e && *p == (object ? '}' : ']')) return 0;
    } else if (*p == ',') {
        p = skip_ws(p + 1, e);
    } else {
        return *p == (object ? '}' : ']') ? 0 : -1;
    }
    if (object) {
        if (p >= e || *p != '"') return -1;
        const char *kend = skip_string(p, e);
        if (!kend) return -1;
        *k = p;
        *klen = (size_t)(kend - p);
        p = skip_ws(kend, e);
        if (p >= e || *p++ != ':') return -1;
        p = skip_ws(p, e);
    }
    const char *end = skip_value(p, e);
    if (!end || end == p) return -1;
    *v = p;
    *vlen = (size_t)(end - p);
    *pp = end;
    return 1;
}

/* The raw text of top-level KEY's value in the object BODY (1: found, 0: absent, -1: not an object). */
static int find_key(const char *body, size_t len, const char *key, const char **val, size_t *vlen) {
    const char *p = body, *e = body + len, *k, *v;
    size_t kl, vl;
    int got;
    while ((got = json_next(&p, e, 1, &k, &kl, &v, &vl)) == 1) {
        if (kl == strlen(key) + 2 && !memcmp(k + 1, key, kl - 2)) {
            *val = v;
            *vlen = vl;
            return 1;
        }
    }
    return got;
}

static int is(const char *val, size_t len, const char *want) { /* a raw string value equal to WANT */
    return len == strlen(want) + 2 && val[0] == '"' && !memcmp(val + 1, want, strlen(want));
}

static int is_null(const char *v, size_t len) { return len == 4 && !memcmp(v, "null", 4); }

static int hex4(const char *p) {
    int n = 0;
    for (int i = 0; i < 4; i++) {
        int c = p[i], d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) return -1;
        n = n * 16 + d;
    }
    return n;
}

/* A raw JSON string as the bytes it stands for (malloc'd, NUL-ended; *n its length), or NULL: not
 * a string, a NUL inside (no C string holds it), or a surrogate Python would not have written. */
static char *json_str(const char *v, size_t len, size_t *n) {
    if (len < 2 || v[0] != '"' || v[len - 1] != '"') return NULL;
    char *out = malloc(len), *o = out;
    if (!out) return NULL;
    for (const char *p = v + 1, *e = v + len - 1; p < e; p++) {
        if ((unsigned char)*p < 0x20) goto bad;
        if (*p != '\\') {
            *o++ = *p;
            continue;
        }
        if (++p >= e) goto bad;
        const char *simple = strchr("\"\\/bfnrt", *p);
        if (simple && *p) {
            *o++ = "\"\\/\b\f\n\r\t"[simple - "\"\\/bfnrt"];
            continue;
        }
        if (*p != 'u' || e - p < 5) goto bad;
        long cp = hex4(p + 1);
        p += 4;
        if (cp <= 0) goto bad;
        if (cp >= 0xd800 && cp <= 0xdbff) { /* a pair */
            int lo = e - p >= 7 && p[1] == '\\' && p[2] == 'u' ? hex4(p + 3) : -1;
            if (lo < 0xdc00 || lo > 0xdfff) goto bad;
            cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
            p += 6;
        } else if (cp >= 0xdc80 && cp <= 0xdcff) { /* surrogateescape: the byte itself */
            *o++ = (char)(cp & 0xff);
            continue;
        } else if (cp >= 0xdc00 && cp <= 0xdfff) {
            goto bad;
        }
        if (cp < 0x80) *o++ = (char)cp;
        else if (cp < 0x800) *o++ = (char)(0xc0 | cp >> 6), *o++ = (char)(0x80 | (cp & 0x3f));
        else if (cp < 0x10000) *o++ = (char)(0xe0 | cp >> 12), *o++ = (char)(0x80 | (cp >> 6 & 0x3f)), *o++ = (char)(0x80 | (cp & 0x3f));
        else
            *o++ = (char)(0xf0 | cp >> 18), *o++ = (char)(0x80 | (cp >> 12 & 0x3f)), *o++ = (char)(0x80 | (cp >> 6 & 0x3f)),
            *o++ = (char)(0x80 | (cp & 0x3f));
    }
    *o = 0;
    if (n) *n = (size_t)(o - out);
    return out;
bad:
    free(out);
    return NULL;
}

/* A JSON number (or null: DFLT) into *out; 0 on success. */
static int json_num(const char *v, size_t len, double dflt, double *out) {
    if (is_null(v, len)) {
        *out = dflt;
        return 0;
    }
    char num[48], *end;
    if (len == 0 || len >= sizeof num) return -1;
    memcpy(num, v, len);
    num[len] = 0;
    *out = strtod(num, &end);
    return *end || *out != *out ? -1 : 0;
}

/* true/false (null: DFLT) into *out; 0 on success. */
static int json_bool(const char *v, size_t len, int dflt, int *out) {
    if (is_null(v, len)) *out = dflt;
    else if (len == 4 && !memcmp(v, "true", 4)) *out = 1;
    else if (len == 5 && !memcmp(v, "false", 5)) *out = 0;
    else return -1;
    return 0;
}

/* -- writing: a growing buffer, and strings as Python's json writes them (ASCII, \uXXXX) -- */

struct buf {
    char *p;
    size_t n, cap;
};

static void put(struct buf *b, const void *data, size_t n) {
    if (!n) return;
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->n + n) cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) _exit(1); /* out of memory in a run's supervisor: the daemon reports it lost */
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, data, n);
    b->n += n;
}

static void putf(struct buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void putf(struct buf *b, const char *fmt, ...) {
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n > 0) put(b, tmp, (size_t)n < sizeof tmp ? (size_t)n : sizeof tmp - 1);
}

static int utf8_seq(const unsigned char *s, size_t left, long *cp) { /* length of a valid sequence at s, or 0 */
    int n = s[0] >= 0xf0 && s[0] <= 0xf4 ? 4 : s[0] >= 0xe0 ? 3 : s[0] >= 0xc2 && s[0] < 0xe0 ? 2 : 0;
    if (!n || left < (size_t)n) return 0;
    long c = s[0] & (0x7f >> n);
    for (int i = 1; i < n; i++) {
        if ((s[i] & 0xc0) != 0x80) return 0;
        c = c << 6 | (s[i] & 0x3f);
    }
    if ((n == 3 && (c < 0x800 || (c >= 0xd800 && c <= 0xdfff))) || (n == 4 && (c < 0x10000 || c > 0x10ffff))) return 0;
    *cp = c;
    return n;
}

static void put_str(struct buf *b, const char *s) { /* bytes that are not UTF-8 as \udcXX, as Python's surrogateescape */
    put(b, "\"", 1);
    for (const unsigned char *p = (const unsigned char *)s; *p;) {
        long cp;
        int n;
        if (*p == '"' || *p == '\\') putf(b, "\\%c", *p), p++;
        else if (*p >= 0x20 && *p < 0x7f) put(b, p++, 1);
        else if (*p < 0x80) putf(b, "\\u%04x", *p), p++;
        else if ((n = utf8_seq(p, strlen((const char *)p), &cp))) {
            if (cp >= 0x10000) putf(b, "\\u%04lx\\u%04lx", 0xd800 + ((cp - 0x10000) >> 10), 0xdc00 + ((cp - 0x10000) & 0x3ff));
            else putf(b, "\\u%04lx", cp);
            p += n;
        } else putf(b, "\\udc%02x", *p), p++;
    }
    put(b, "\"", 1);
}
