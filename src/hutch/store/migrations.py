"""The schema's history: named migrations, applied once each and in order (:mod:`hutch.store.db`).

A migration is never edited once it has shipped: databases made by any earlier hutch run
the ones they have not seen. A change to the schema is a new entry at the end.
"""

from __future__ import annotations

INITIAL_SQL = """
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
        CREATE UNIQUE INDEX sandboxes_live_name ON sandboxes(name)
            WHERE name IS NOT NULL AND state IN ('creating', 'running', 'destroying');
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
        );
        CREATE INDEX runs_sandbox ON runs(sandbox_id, started_at);
        CREATE TABLE events (
            seq INTEGER PRIMARY KEY AUTOINCREMENT,
            time REAL NOT NULL,
            sandbox_id TEXT,
            run_id TEXT,
            type TEXT NOT NULL,
            data TEXT NOT NULL DEFAULT '{}'
        );
        CREATE INDEX events_sandbox ON events(sandbox_id, seq);
        """

RUN_DETAILS_SQL = """
        ALTER TABLE runs ADD COLUMN background INTEGER NOT NULL DEFAULT 0;
        ALTER TABLE runs ADD COLUMN cwd TEXT;
        ALTER TABLE runs ADD COLUMN env_keys TEXT NOT NULL DEFAULT '[]';
        ALTER TABLE runs ADD COLUMN timeout REAL;
        ALTER TABLE runs ADD COLUMN idle_timeout REAL;
        ALTER TABLE runs ADD COLUMN signal INTEGER;
        ALTER TABLE runs ADD COLUMN error TEXT;
        CREATE INDEX runs_status ON runs(status);
        CREATE INDEX events_type ON events(type, seq);
        """

WORKSPACES_SQL = """
        CREATE TABLE snapshots (
            name TEXT PRIMARY KEY,
            sandbox_id TEXT NOT NULL,
            provider TEXT NOT NULL,
            path TEXT NOT NULL,
            size INTEGER NOT NULL DEFAULT 0,
            created_at REAL NOT NULL
        );
        CREATE TABLE tenants (
            name TEXT PRIMARY KEY,
            provider TEXT NOT NULL,
            created_at REAL NOT NULL
        );
        CREATE TABLE manifests (
            sandbox_id TEXT PRIMARY KEY,
            data TEXT NOT NULL,
            updated_at REAL NOT NULL
        );
        """

LIFECYCLE_SQL = """
        ALTER TABLE sandboxes ADD COLUMN expires_at REAL;
        ALTER TABLE sandboxes ADD COLUMN last_active_at REAL;
        ALTER TABLE sandboxes ADD COLUMN parent_id TEXT;
        CREATE INDEX sandboxes_parent ON sandboxes(parent_id);
        DROP INDEX sandboxes_live_name;
        CREATE UNIQUE INDEX sandboxes_live_name ON sandboxes(name)
            WHERE name IS NOT NULL AND state IN ('creating', 'running', 'paused', 'destroying');
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
        CREATE INDEX approvals_status ON approvals(status, created_at);
"""

CLAIMS_SQL = """
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
CREATE INDEX claims_scope ON claims(provider, endpoint, account);
CREATE INDEX claims_sandbox ON claims(sandbox_id);
"""

# images (store/images.py): stored images by config digest, and the names pointing at them
IMAGES_SQL = """
CREATE TABLE images (
    id TEXT PRIMARY KEY,
    manifest_digest TEXT NOT NULL,
    manifest TEXT NOT NULL,
    config TEXT NOT NULL,
    layers TEXT NOT NULL,
    size INTEGER NOT NULL,
    platform TEXT NOT NULL,
    source TEXT NOT NULL,
    created_at REAL NOT NULL
);
CREATE TABLE image_names (
    name TEXT PRIMARY KEY,
    image_id TEXT NOT NULL REFERENCES images(id),
    updated_at REAL NOT NULL
);
CREATE INDEX image_names_image ON image_names(image_id);
"""

KEYS_SQL = """
CREATE TABLE keys (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    hash TEXT NOT NULL,
    scopes TEXT NOT NULL,
    quotas TEXT NOT NULL DEFAULT '{}',
    network_default TEXT,
    network_ceiling TEXT,
    created_at REAL NOT NULL,
    expires_at REAL,
    revoked_at REAL,
    rotated_at REAL,
    created_by TEXT
);
CREATE UNIQUE INDEX keys_live_name ON keys(name) WHERE revoked_at IS NULL;
ALTER TABLE sandboxes ADD COLUMN owner TEXT;
ALTER TABLE snapshots ADD COLUMN owner TEXT;
ALTER TABLE tenants ADD COLUMN owner TEXT;
ALTER TABLE approvals ADD COLUMN owner TEXT;
ALTER TABLE events ADD COLUMN actor TEXT;
UPDATE sandboxes SET owner = 'owner';
UPDATE snapshots SET owner = 'owner';
UPDATE tenants SET owner = 'owner';
UPDATE approvals SET owner = 'owner';
CREATE INDEX sandboxes_owner ON sandboxes(owner, state);
"""

# client certificates of the gateway (store/certs.py): each bound to an API key by its fingerprint
CERTS_SQL = """
CREATE TABLE certificates (
    fingerprint TEXT PRIMARY KEY,
    serial TEXT NOT NULL,
    name TEXT NOT NULL,
    key_id TEXT NOT NULL,
    created_at REAL NOT NULL,
    expires_at REAL NOT NULL,
    revoked_at REAL
);
CREATE INDEX certificates_name ON certificates(name);
CREATE INDEX certificates_key ON certificates(key_id);
"""

# images per key (store/images.py): who holds each image, and each owner's own names; what was
# stored before belongs to the local user
IMAGE_OWNERS_SQL = """
CREATE TABLE image_owners (
    image_id TEXT NOT NULL REFERENCES images(id),
    owner TEXT NOT NULL,
    PRIMARY KEY (image_id, owner)
);
CREATE INDEX image_owners_owner ON image_owners(owner);
INSERT INTO image_owners (image_id, owner) SELECT id, 'owner' FROM images;
CREATE TABLE image_names_owned (
    owner TEXT NOT NULL,
    name TEXT NOT NULL,
    image_id TEXT NOT NULL REFERENCES images(id),
    updated_at REAL NOT NULL,
    PRIMARY KEY (owner, name)
);
INSERT INTO image_names_owned (owner, name, image_id, updated_at) SELECT 'owner', name, image_id, updated_at FROM image_names;
DROP TABLE image_names;
ALTER TABLE image_names_owned RENAME TO image_names;
CREATE INDEX image_names_image ON image_names(image_id);
"""

# the warm pool (store/pool.py): its members, recorded before they start, and the sizes set per shape
POOL_SQL = """
CREATE TABLE pool_members (
    id TEXT PRIMARY KEY,
    provider TEXT NOT NULL,
    image TEXT NOT NULL DEFAULT '',
    state TEXT NOT NULL,
    spec TEXT NOT NULL,
    data TEXT NOT NULL DEFAULT '{}',
    enforcement TEXT NOT NULL DEFAULT '{}',
    created_at REAL NOT NULL
);
CREATE TABLE pools (
    provider TEXT NOT NULL,
    image TEXT NOT NULL DEFAULT '',
    size INTEGER NOT NULL,
    updated_at REAL NOT NULL,
    PRIMARY KEY (provider, image)
);
"""

# names per owner: a sandbox's (live) and a snapshot's name is unique among its owner's own, so a
# key's choice of name never collides with (and so never tells of) another key's
NAMES_PER_OWNER_SQL = """
DROP INDEX sandboxes_live_name;
UPDATE sandboxes SET owner = 'owner' WHERE owner IS NULL;
CREATE UNIQUE INDEX sandboxes_live_name ON sandboxes(owner, name)
    WHERE name IS NOT NULL AND state IN ('creating', 'running', 'paused', 'destroying');
CREATE INDEX sandboxes_name ON sandboxes(name);
CREATE TABLE snapshots_owned (
    owner TEXT NOT NULL,
    name TEXT NOT NULL,
    sandbox_id TEXT NOT NULL,
    provider TEXT NOT NULL,
    path TEXT NOT NULL,
    size INTEGER NOT NULL DEFAULT 0,
    created_at REAL NOT NULL,
    PRIMARY KEY (owner, name)
);
INSERT INTO snapshots_owned (owner, name, sandbox_id, provider, path, size, created_at)
    SELECT COALESCE(owner, 'owner'), name, sandbox_id, provider, path, size, created_at FROM snapshots;
DROP TABLE snapshots;
ALTER TABLE snapshots_owned RENAME TO snapshots;
CREATE INDEX snapshots_name ON snapshots(name);
"""

# exposed ports (store/ports.py): kept so that they outlive a restart of the daemon
PORTS_SQL = """
CREATE TABLE ports (
    sandbox_id TEXT NOT NULL,
    port INTEGER NOT NULL,
    public INTEGER NOT NULL,
    owner TEXT,
    nonce TEXT NOT NULL,
    created_at REAL NOT NULL,
    PRIMARY KEY (sandbox_id, port)
);
"""

# a cluster gateway's nodes (store/nodes.py): the last state seen, and the operator's drain
NODES_SQL = """
CREATE TABLE nodes (
    name TEXT PRIMARY KEY,
    state TEXT NOT NULL,
    drained INTEGER NOT NULL DEFAULT 0,
    info TEXT NOT NULL DEFAULT '{}',
    updated_at REAL NOT NULL
);
"""

# the E2B API's processes: the pid it handed out for each command and the run behind it, so that
# commands.connect(pid) finds a command again after a daemon restart
E2B_PROCESSES_SQL = """
CREATE TABLE e2b_processes (
    sandbox_id TEXT NOT NULL,
    pid INTEGER NOT NULL,
    run_id TEXT NOT NULL,
    tag TEXT,
    pty INTEGER NOT NULL DEFAULT 0,
    config TEXT NOT NULL DEFAULT '{}',
    PRIMARY KEY (sandbox_id, pid)
);
"""

# tenants per owner (store/workspaces.py), each with where its provider keeps it: a tenant made
# before keeps its place (storage = its name)
TENANTS_PER_OWNER_SQL = """
CREATE TABLE tenants_owned (
    owner TEXT NOT NULL,
    name TEXT NOT NULL,
    provider TEXT NOT NULL,
    storage TEXT NOT NULL,
    created_at REAL NOT NULL,
    PRIMARY KEY (owner, name)
);
INSERT INTO tenants_owned (owner, name, provider, storage, created_at)
    SELECT COALESCE(owner, 'owner'), name, provider, name, created_at FROM tenants;
DROP TABLE tenants;
ALTER TABLE tenants_owned RENAME TO tenants;
CREATE UNIQUE INDEX tenants_storage ON tenants(storage);
"""

MIGRATIONS: list[tuple[str, str]] = [
    ("0001_initial", INITIAL_SQL),
    ("0002_run_details", RUN_DETAILS_SQL),
    ("0004_workspaces", WORKSPACES_SQL),
    ("0005_lifecycle", LIFECYCLE_SQL),
    ("0006_claims", CLAIMS_SQL),
    ("0007_images", IMAGES_SQL),
    ("0008_keys", KEYS_SQL),  # API keys (hashed); who owns each sandbox, snapshot, tenant, approval; each event's actor
    ("0009_certificates", CERTS_SQL),
    ("0010_image_owners", IMAGE_OWNERS_SQL),  # images per key: their owners, and names per owner
    ("0011_pool", POOL_SQL),
    ("0012_names_per_owner", NAMES_PER_OWNER_SQL),
    ("0013_ports", PORTS_SQL),
    ("0014_nodes", NODES_SQL),
    ("0015_e2b_processes", E2B_PROCESSES_SQL),
    ("0016_tenants_per_owner", TENANTS_PER_OWNER_SQL),
]
