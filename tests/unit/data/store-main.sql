BEGIN TRANSACTION;
CREATE TABLE approvals (
            id TEXT PRIMARY KEY,
            sandbox_id TEXT,
            action TEXT NOT NULL,
            detail TEXT,
            reason TEXT,
            status TEXT NOT NULL,
            created_at REAL NOT NULL,
            expires_at REAL,
            decided_at REAL,
            decided_by TEXT,
            decision_reason TEXT,
            used_at REAL
        );
INSERT INTO "approvals" VALUES('apr_00000000000000000001','sbx_00000000000000000001','destroy','d','r','pending',1700000030.0,1700003000.0,NULL,NULL,NULL,NULL);
CREATE TABLE claims (
    id TEXT PRIMARY KEY,
    provider TEXT NOT NULL,
    sandbox_id TEXT,
    name TEXT NOT NULL UNIQUE,
    endpoint TEXT NOT NULL,
    account TEXT NOT NULL,
    request_hash TEXT NOT NULL,
    resource_id TEXT,
    state TEXT NOT NULL,
    revision INTEGER NOT NULL DEFAULT 1,
    keep INTEGER NOT NULL DEFAULT 0,
    expires_at REAL,
    error TEXT,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL
);
INSERT INTO "claims" VALUES('clm_00000000000000000001','unikraft','sbx_00000000000000000001','hutch-1','https://api.example','acct','h','uuid-1','ready',1,0,NULL,NULL,1.7961581471416714191e+09,1.7961581471416714191e+09);
CREATE TABLE events (
            seq INTEGER PRIMARY KEY AUTOINCREMENT,
            time REAL NOT NULL,
            sandbox_id TEXT,
            run_id TEXT,
            type TEXT NOT NULL,
            data TEXT NOT NULL DEFAULT '{}'
        );
INSERT INTO "events" VALUES(1,1700000010.0,'sbx_00000000000000000001','run_00000000000000000001','run_started','{"command": ["echo", "hi"], "env_keys": ["A"], "background": false}');
INSERT INTO "events" VALUES(2,1.79615814714128136635e+09,'sbx_00000000000000000001','run_00000000000000000001','run_finished','{"exit_code": 0}');
INSERT INTO "events" VALUES(3,1700000020.0,'sbx_00000000000000000001','run_00000000000000000002','run_started','{"command": ["sleep", "9"], "env_keys": [], "background": true}');
INSERT INTO "events" VALUES(4,1.79615814714145112041e+09,'sbx_00000000000000000001',NULL,'sandbox_created','{"note": "x"}');
INSERT INTO "events" VALUES(5,1700000030.0,'sbx_00000000000000000001',NULL,'approval_requested','{"approval_id": "apr_00000000000000000001", "action": "destroy", "detail": "d", "reason": "r"}');
CREATE TABLE manifests (
            sandbox_id TEXT PRIMARY KEY,
            data TEXT NOT NULL,
            updated_at REAL NOT NULL
        );
INSERT INTO "manifests" VALUES('sbx_00000000000000000001','{"a.txt": [1, 2]}',1.79615814714164137837e+09);
CREATE TABLE migrations (name TEXT PRIMARY KEY, applied_at REAL NOT NULL);
INSERT INTO "migrations" VALUES('0001_initial',1.79615814713645982744e+09);
INSERT INTO "migrations" VALUES('0002_run_details',1.79615814713697242738e+09);
INSERT INTO "migrations" VALUES('0004_workspaces',1.79615814713706231121e+09);
INSERT INTO "migrations" VALUES('0005_lifecycle',1.79615814713740968699e+09);
INSERT INTO "migrations" VALUES('0006_claims',1.79615814713750314717e+09);
CREATE TABLE runs (
            id TEXT PRIMARY KEY,
            sandbox_id TEXT NOT NULL REFERENCES sandboxes(id),
            command TEXT NOT NULL,
            status TEXT NOT NULL,
            exit_code INTEGER,
            started_at REAL NOT NULL,
            finished_at REAL,
            duration_ms REAL,
            stdout_bytes INTEGER NOT NULL DEFAULT 0,
            stderr_bytes INTEGER NOT NULL DEFAULT 0,
            truncated INTEGER NOT NULL DEFAULT 0
        , background INTEGER NOT NULL DEFAULT 0, cwd TEXT, env_keys TEXT NOT NULL DEFAULT '[]', timeout REAL, idle_timeout REAL, signal INTEGER, error TEXT);
INSERT INTO "runs" VALUES('run_00000000000000000001','sbx_00000000000000000001','["echo", "hi"]','completed',0,1700000010.0,1.79615814714128136635e+09,12.5,3,0,0,0,'/w','["A"]',5.0,NULL,NULL,NULL);
INSERT INTO "runs" VALUES('run_00000000000000000002','sbx_00000000000000000001','["sleep", "9"]','running',NULL,1700000020.0,NULL,NULL,0,0,0,1,NULL,'[]',NULL,NULL,NULL,NULL);
CREATE TABLE sandboxes (
            id TEXT PRIMARY KEY,
            name TEXT,
            provider TEXT NOT NULL,
            state TEXT NOT NULL,
            spec TEXT NOT NULL,
            data TEXT NOT NULL DEFAULT '{}',
            enforcement TEXT NOT NULL DEFAULT '{}',
            error TEXT,
            created_at REAL NOT NULL,
            updated_at REAL NOT NULL
        , expires_at REAL, last_active_at REAL, parent_id TEXT);
INSERT INTO "sandboxes" VALUES('sbx_00000000000000000001','web','fake','running','{"name":"web","provider":"fake","limits":{"memory":1073741824,"pids":512,"cpus":null},"env":{"API_KEY":"***"},"mounts":[],"labels":{},"workdir":"/workspace","network":{"mode":"none","allow_hosts":[],"deny_hosts":[],"ports":[],"cidrs":[]},"image":null,"provider_options":{},"secret_names":[],"tenant":null,"session":null,"ttl":null,"idle_timeout":null,"on_expire":"destroy","require_approval":[],"parent":null,"workspace":null}','{"slot": 1}','{"memory": "cgroup"}',NULL,1700000001.0,1700000001.0,NULL,1700000050.0,NULL);
INSERT INTO "sandboxes" VALUES('sbx_00000000000000000002',NULL,'fake','destroyed','{"name":null,"provider":"fake","limits":{"memory":1073741824,"pids":512,"cpus":null},"env":{"API_KEY":"***"},"mounts":[],"labels":{},"workdir":"/workspace","network":{"mode":"none","allow_hosts":[],"deny_hosts":[],"ports":[],"cidrs":[]},"image":null,"provider_options":{},"secret_names":[],"tenant":null,"session":null,"ttl":null,"idle_timeout":null,"on_expire":"destroy","require_approval":[],"parent":null,"workspace":null}','{"slot": 2}','{"memory": "cgroup"}',NULL,1700000002.0,1700000002.0,NULL,NULL,NULL);
INSERT INTO "sandboxes" VALUES('sbx_00000000000000000003','child','fake','paused','{"name":"child","provider":"fake","limits":{"memory":1073741824,"pids":512,"cpus":null},"env":{"API_KEY":"***"},"mounts":[],"labels":{},"workdir":"/workspace","network":{"mode":"none","allow_hosts":[],"deny_hosts":[],"ports":[],"cidrs":[]},"image":null,"provider_options":{},"secret_names":[],"tenant":null,"session":null,"ttl":null,"idle_timeout":null,"on_expire":"destroy","require_approval":[],"parent":"sbx_00000000000000000001","workspace":null}','{"slot": 3}','{"memory": "cgroup"}',NULL,1700000003.0,1700000003.0,NULL,NULL,'sbx_00000000000000000001');
CREATE TABLE snapshots (
            name TEXT PRIMARY KEY,
            sandbox_id TEXT NOT NULL,
            provider TEXT NOT NULL,
            path TEXT NOT NULL,
            size INTEGER NOT NULL DEFAULT 0,
            created_at REAL NOT NULL
        );
INSERT INTO "snapshots" VALUES('snap1','sbx_00000000000000000001','fake','/tmp/snap1',42,1700000040.0);
CREATE TABLE tenants (
            name TEXT PRIMARY KEY,
            provider TEXT NOT NULL,
            created_at REAL NOT NULL
        );
INSERT INTO "tenants" VALUES('acme','fake',1.79615814714161229131e+09);
CREATE INDEX runs_sandbox ON runs(sandbox_id, started_at);
CREATE INDEX events_sandbox ON events(sandbox_id, seq);
CREATE INDEX runs_status ON runs(status);
CREATE INDEX events_type ON events(type, seq);
CREATE INDEX sandboxes_parent ON sandboxes(parent_id);
CREATE UNIQUE INDEX sandboxes_live_name ON sandboxes(name)
            WHERE name IS NOT NULL AND state IN ('creating', 'running', 'paused', 'destroying');
CREATE INDEX approvals_status ON approvals(status, created_at);
CREATE INDEX claims_scope ON claims(provider, endpoint, account);
CREATE INDEX claims_sandbox ON claims(sandbox_id);
DELETE FROM "sqlite_sequence";
INSERT INTO "sqlite_sequence" VALUES('events',5);
COMMIT;
