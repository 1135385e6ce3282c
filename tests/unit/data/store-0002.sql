BEGIN TRANSACTION;
CREATE TABLE events (
            seq INTEGER PRIMARY KEY AUTOINCREMENT,
            time REAL NOT NULL,
            sandbox_id TEXT,
            run_id TEXT,
            type TEXT NOT NULL,
            data TEXT NOT NULL DEFAULT '{}'
        );
INSERT INTO "events" VALUES(1,1700000000.0,'sbx_00000000000000000007',NULL,'sandbox_created','{}');
CREATE TABLE migrations (name TEXT PRIMARY KEY, applied_at REAL NOT NULL);
INSERT INTO "migrations" VALUES('0001_initial',1.79615814716967797277e+09);
INSERT INTO "migrations" VALUES('0002_run_details',1.7961581471701881886e+09);
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
INSERT INTO "runs" VALUES('run_00000000000000000007','sbx_00000000000000000007','["true"]','running',NULL,1700000000.0,NULL,NULL,0,0,0,0,NULL,'[]',NULL,NULL,NULL,NULL);
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
        );
INSERT INTO "sandboxes" VALUES('sbx_00000000000000000007','old','fake','running','{"name":"old","provider":"fake","limits":{"memory":1073741824,"pids":512,"cpus":null},"env":{},"mounts":[],"labels":{},"workdir":"/workspace","network":{"mode":"none","allow_hosts":[],"deny_hosts":[],"ports":[],"cidrs":[]},"image":null,"provider_options":{},"secret_names":[],"tenant":null,"session":null,"ttl":null,"idle_timeout":null,"on_expire":"destroy","require_approval":[],"parent":null,"workspace":null}','{}','{}',NULL,1700000000.0,1700000000.0);
CREATE UNIQUE INDEX sandboxes_live_name ON sandboxes(name)
            WHERE name IS NOT NULL AND state IN ('creating', 'running', 'destroying');
CREATE INDEX runs_sandbox ON runs(sandbox_id, started_at);
CREATE INDEX events_sandbox ON events(sandbox_id, seq);
CREATE INDEX runs_status ON runs(status);
CREATE INDEX events_type ON events(type, seq);
DELETE FROM "sqlite_sequence";
INSERT INTO "sqlite_sequence" VALUES('events',1);
COMMIT;
