/*
 * sandbox.h — confinement of the commands an agent runs (docs/sandbox.md,
 * docs/threat-model.md): profiles, grants, the machine probe and guarantee report,
 * the sealed spec the host hands to the confinement helper, and the helper
 * itself.
 *
 * C, no Lua, no event loop: sandbox/ sits beside storage/ below host/. It
 * includes only util/. The host side (executors spawning the helper,
 * the egress proxy served on the loop) lives in host/; the Lua face in
 * lua/sandbox.c.
 *
 * The flow of one confined command:
 *   profile (validated) + probe (once per process) -> report; refuse when
 *   the profile needs a guarantee the machine lacks;
 *   executor builds an lr_sbx_spec (argv, env, cwd, mounts, Landlock rules,
 *   limits, network mode, grants' deltas) -> lr_sbx_spec_encode ->
 *   a sealed memfd -> spawns "/proc/self/exe __sandbox-helper" (or a
 *   copy of a process that runs it: the CLI's fork, a set's pre-forked
 *   helper, sandbox/zygote.c) with the
 *   memfd as fd 3, the read end of the run's lifeline as fd 4 (and, with a
 *   proxy, a socket as fd 5 on which the helper
 *   sends back the listeners it made inside the network namespace) ->
 *   lr_sbx_helper_main decodes, sets everything up, and execs the target
 *   under a reaper; any failure before the exec exits 126.
 *
 * Errors: 0, -errno, or an LR_E* code, with the message in the caller's
 * struct lr_err (util.h), naming the subject ("profile: field
 * 'workspace_write' must be deny, gated or allow").
 */
#ifndef LR_SANDBOX_H
#define LR_SANDBOX_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "../util/util.h"

/* ---- profiles (sandbox/profile.c) ---- */

enum lr_cap { LR_CAP_DENY = 0, LR_CAP_GATED = 1, LR_CAP_ALLOW = 2 };
enum lr_home { LR_HOME_ISOLATED = 0, LR_HOME_REAL = 1 };
enum lr_isolation { LR_ISO_SANDBOXED = 0, LR_ISO_UNCONFINED = 1 };

/* An extra root (a cache directory, a toolchain) with its own states. */
struct lr_sbx_root {
	char *path; /* absolute, canonical */
	enum lr_cap read, write;
};

struct lr_profile {
	char *workspace_root; /* absolute, canonical (realpath), a directory */
	enum lr_cap workspace_read, workspace_write;
	enum lr_cap host_read, host_write;
	enum lr_cap network;
	enum lr_cap command;
	enum lr_cap delegate; /* starting or messaging a delegate loop (the gate only) */
	enum lr_cap mcp;      /* calling an MCP server's tool, answering its sampling (the gate only) */
	enum lr_home home;
	enum lr_isolation isolation;
	struct lr_sbx_root *roots;
	size_t nroots;
	int ack_unconfined;
	/* Files the host interprets later (sandbox/protect.c): names added to
	 * lr_protect_default_names, every git directory read-only as a whole
	 * (git_readonly), and the cap on the protected-path walk (0: the default). */
	char **protect_names;
	size_t nprotect_names;
	int git_readonly;
	size_t protect_max_entries;
};

/* Names as the Lua and CLI faces spell them: "deny", "gated", "allow" ... */
const char *lr_cap_name(enum lr_cap c);
int lr_cap_parse(const char *s, enum lr_cap *out);

/*
 * Checks a profile: every state in range; workspace_root absolute,
 * canonical and an existing directory; roots absolute, canonical, not
 * duplicated, not overlapping the workspace; write never wider than read
 * for the same place; unconfined only with every filesystem and network
 * field allow and ack_unconfined. The message names the field.
 */
int lr_profile_validate(const struct lr_profile *p, struct lr_err *err);
/* A stable hex SHA-256 of the canonical encoding (field order fixed, roots sorted). */
void lr_profile_fingerprint(const struct lr_profile *p, char out[65]);
/*
 * The state for one request of the gate. kind: "filesystem.read",
 * "filesystem.write", "network", "command.execute", "delegate", "mcp"; scope: a path
 * (for the filesystem kinds: inside the workspace, an extra root or the host)
 * or a "host:port" (network) or a command line or a delegate loop's name
 * (delegate: one state for every delegate; the OS enforces nothing here, the
 * gate is the whole mechanism) or "SERVER/TOOL" / "SERVER:sampling" (mcp: one
 * state for every server and tool, likewise). Unknown kind: -EINVAL with a
 * message, and *out = LR_CAP_DENY (fail closed).
 */
int lr_profile_access_for(const struct lr_profile *p, const char *kind, const char *scope,
			  enum lr_cap *out, struct lr_err *err);
/*
 * out = the component-wise intersection of base and ceiling (the lower of
 * each state; home real only if both are real; sandboxed unless both are
 * unconfined; roots present in both with the lower states). Never wider than
 * either. The workspace must be the same (or -EINVAL). out owns copies.
 */
int lr_profile_restrict(const struct lr_profile *base, const struct lr_profile *ceiling,
			struct lr_profile *out, struct lr_err *err);
int lr_profile_copy(const struct lr_profile *src, struct lr_profile *out);
void lr_profile_release(struct lr_profile *p);

/*
 * The defaults every face starts from: workspace_read allow, workspace_write
 * gated, host_read allow, host_write deny, network gated, command gated,
 * delegate gated, mcp gated, home isolated, isolation sandboxed, no roots, no
 * acknowledgement, and workspace_root NULL (the caller sets it; validation requires it).
 */
void lr_profile_init(struct lr_profile *p);
/*
 * A path resolved the way access_for sees it: relative paths against the
 * workspace, "." and ".." folded, symlinks resolved through the longest
 * existing prefix (realpath -m). out gets PATH_MAX bytes. 0 or -errno.
 */
int lr_profile_resolve(const struct lr_profile *p, const char *path, char *out, size_t outlen);

/* ---- the machine (sandbox/probe.c) ---- */

enum lr_tier { LR_TIER_NONE = 0, LR_TIER_B = 1, LR_TIER_A = 2 };

struct lr_sbx_caps {
	int userns;          /* unprivileged user namespaces work (tested in a child) */
	int netns, pidns, mountns;
	int mount_api;       /* open_tree/move_mount/fsopen work in a user+mount namespace */
	int landlock_abi;    /* 0: none */
	int seccomp;         /* seccomp filters load (libseccomp present) */
	int cgroup;          /* a delegated cgroup v2 subtree we may create children in */
	char cgroup_path[256];
	enum lr_tier tier;
	char why[LR_ERR_LEN];    /* what is missing, for the report */
	/* What the cgroup probe found, said plainly: the layout
	 * (v2, v1/v2 hybrid, v1 only), where the unified hierarchy is, and
	 * whether memory and pids can be limited there. */
	char cgroup_note[256];
	int cached;          /* the namespace and seccomp results came from the per-boot cache */
	int etc_idmap;       /* as root: an idmapped clone of /etc can be made (spec etc_idmap) */
};
/*
 * Probes once per process (cached); safe to call from any thread after the
 * first. A tier-A result is also remembered for the boot in a file only the
 * user can write (probe.c says where and why that cannot weaken anything);
 * a later process that finds it sets caps->cached and forks no test child.
 */
const struct lr_sbx_caps *lr_sbx_probe(void);
/* The same, ignoring a remembered result (and rewriting it): `sandbox check`.
   Only before the first lr_sbx_probe of the process. */
const struct lr_sbx_caps *lr_sbx_probe_fresh(void);

/* The guarantees (docs/sandbox.md), in report order. */
enum lr_guarantee {
	LR_G_READ_BOUNDARY, LR_G_WRITE_BOUNDARY, LR_G_NETWORK_BOUNDARY, LR_G_TARGET_NETWORK,
	LR_G_PROCESS_BOUNDARY, LR_G_RESOURCE_LIMITS, LR_G_ENV_SCRUB, LR_G_PROTECTED_FILES, LR_G_COUNT
};
const char *lr_guarantee_name(enum lr_guarantee g); /* "read_boundary", ... */

struct lr_sbx_report {
	enum lr_tier tier;
	int enforced[LR_G_COUNT];          /* 1 when the OS enforces it for this profile */
	int required[LR_G_COUNT];          /* 1 when the profile needs it */
	char how[LR_G_COUNT][320];         /* "landlock ABI 7 + mount namespace", ... */
	char missing[LR_G_COUNT][320];     /* why not, when not enforced */
	char protected_names[512];         /* the protected names of the profile, space-separated */
};
/*
 * What the machine gives this profile. Returns 0, or LR_EREFUSED (with a
 * message naming the first required guarantee that is missing) when the
 * profile needs one the machine lacks; the report is filled either way.
 */
int lr_sbx_report(const struct lr_profile *p, const struct lr_sbx_caps *caps,
		  struct lr_sbx_report *r, struct lr_err *err);

/* ---- the spec the host seals for the helper (sandbox/spec.c) ---- */

/* Landlock access masks are the kernel's LANDLOCK_ACCESS_FS_* bits. */
struct lr_sbx_path_rule {
	char *path;
	uint64_t access;
};

/*
 * One bind in the mount view: host path src visible at dst. A character
 * device as src (the host's /dev/null) is a mask: bound over a file, and
 * over a directory replaced by an empty read-only tmpfs of mode 0000.
 */
struct lr_sbx_mount {
	char *src, *dst;
	int writable;
};

enum lr_sbx_net {
	LR_SBX_NET_NONE = 0,  /* a network namespace with loopback only */
	LR_SBX_NET_PROXY = 1, /* loopback only, plus the proxy listeners the helper makes */
	LR_SBX_NET_HOST = 2,  /* the host's network (unconfined profiles only) */
};

struct lr_sbx_limits {
	uint64_t as_bytes;     /* RLIMIT_AS; 0: unlimited */
	uint64_t fsize_bytes;  /* RLIMIT_FSIZE */
	uint64_t nproc;        /* RLIMIT_NPROC (per uid: the mapped uid) and the cgroup pids.max */
	uint64_t nofile;       /* RLIMIT_NOFILE */
	uint64_t cpu_seconds;  /* RLIMIT_CPU */
	uint64_t memory_bytes; /* cgroup memory.max when a cgroup is used */
	/* The size and file count of each memory-backed file system the view
	   holds writable (/tmp and /dev/shm; /run gets an eighth of both).
	   0: derived by lr_sbx_tmpfs_limits, so a tmpfs is never unbounded. */
	uint64_t tmpfs_bytes;
	uint64_t tmpfs_inodes;
};

/*
 * The limits every run gets (sandbox/build.c): file size 1 GiB, 512
 * processes, 1024 open files, memory 2 GiB (cgroup), no address-space or
 * cpu limit, and the tmpfs sizes derived from them.
 */
void lr_sbx_default_limits(struct lr_sbx_limits *l);
/*
 * The tmpfs size of l, or the one derived when l gives none: a quarter of
 * the memory limit (512 MiB without one), at most the file-size limit, at
 * least 1 MiB; one file per 8 KiB of it, at least 1024. Inodes cost kernel
 * memory a size does not count, hence a bound of their own.
 */
void lr_sbx_tmpfs_limits(const struct lr_sbx_limits *l, uint64_t *bytes, uint64_t *inodes);

struct lr_sbx_spec {
	uint64_t exec_id;
	enum lr_tier tier;
	int unconfined;            /* run the target as is (no namespaces, no Landlock) */
	char **argv;               /* NULL-terminated; argv[0] resolved to an absolute path by the host */
	char **envp;               /* the complete, already scrubbed environment */
	char *cwd;                 /* inside the view */
	struct lr_sbx_mount *mounts;
	size_t nmounts;
	struct lr_sbx_path_rule *rules; /* Landlock: every path the target may touch, with rights */
	size_t nrules;
	char **readonly;           /* protected paths inside writable roots, bound read-only */
	size_t nreadonly;
	struct lr_sbx_limits limits;
	enum lr_sbx_net net;
	uint16_t proxy_port;       /* LR_SBX_NET_PROXY: the loopback port of the HTTP/CONNECT listener */
	uint16_t dns_port;         /* and of the DNS stub (UDP) */
	char *cgroup;              /* a cgroup directory to create and enter, or NULL */
	/*
	 * luarig runs as root: /etc is bound through an idmapped mount (every
	 * owner shown as an unmapped id), so the target, uid 0 without
	 * capabilities, reads there only what others may read. The helper
	 * makes it before it leaves the host's user namespace, or exits 126.
	 */
	int etc_idmap;
	uid_t uid;                 /* the real uid/gid mapped inside */
	gid_t gid;
	/*
	 * The seccomp filter the target loads last, compiled by the host
	 * (struct sock_filter[], seccomp_len bytes, a multiple of 8, at most
	 * LR_SBX_SECCOMP_MAX), the same bytes for every run; NULL/0: the helper
	 * builds it itself with libseccomp. Owned by the spec.
	 */
	unsigned char *seccomp_bpf;
	size_t seccomp_len;
};

/* The encoding is JSON (jansson) with a version field; the decoder is strict. */
int lr_sbx_spec_encode(const struct lr_sbx_spec *s, char **out, size_t *len);
int lr_sbx_spec_decode(const char *buf, size_t len, struct lr_sbx_spec *out,
		       struct lr_err *err);
void lr_sbx_spec_release(struct lr_sbx_spec *s);
/* A memfd holding buf, sealed against every change (F_SEAL_SEAL|SHRINK|GROW|WRITE). */
int lr_sbx_seal(const char *buf, size_t len);

/* ---- the helper (sandbox/helper.c) ---- */

/*
 * fds the helper receives: the spec; the lifeline, the read end of a pipe
 * whose write end only the host holds (for the length of the run): when it
 * reads EOF (the host closed it, or the host died, however) the helper
 * kills everything the run started and exits; and, with a proxy, the
 * control socket.
 */
enum { LR_SBX_FD_SPEC = 3, LR_SBX_FD_LIFELINE = 4, LR_SBX_FD_CONTROL = 5 };
/*
 * "luarig __sandbox-helper --end-fd=N": fd N, the next after the others (5,
 * or 6 after the control socket), is the write end of a pipe, and in tier A
 * the reaper writes one struct lr_sbx_end there as soon as the target and
 * everything else in the run's pid namespace are gone: code is the status
 * the helper will exit with, told before the helper's exit tears the
 * namespaces down (a millisecond or more). Nothing is written when the run
 * ends any other way (a failed set-up, the helper killed): the helper's exit
 * tells. The target never holds the fd. Tier B and unconfined runs close it.
 */
#define LR_SBX_END_MAGIC 0x6c726531u /* "lre1" */
struct lr_sbx_end {
	uint32_t magic;
	int32_t code;
};
/* the exit status of a helper that could not set up confinement */
#define LR_SBX_EXIT_SETUP 126
/*
 * The hidden subcommand "luarig __sandbox-helper": runs before any Lua
 * state or thread exists. Reads and checks the spec on fd 3 (it must be a
 * sealed memfd), builds the confinement and execs the target under a
 * reaper that is pid 1 of the new pid namespace; exits with the target's
 * status (128+N for a signal), or 126 when anything before the exec failed
 * (a message on stderr starting "luarig sandbox: ").
 */
int lr_sbx_helper_main(int argc, char **argv);

/*
 * The pre-forked helper (sandbox/zygote.c), "luarig __sandbox-helper
 * --zygote": fd 3 a SOCK_SEQPACKET socket to the host, fd 4 its lifeline.
 * Per request (one struct lr_sbx_zygote_req with the run's fds 0, 1, 2, 3,
 * 4 and, with a proxy, 5 as SCM_RIGHTS, in that order) it forks a copy
 * that leads its own process group and runs lr_sbx_helper_main with them,
 * and answers STARTED (pid, and a pidfd of the copy as SCM_RIGHTS) or
 * FAILED (err); EXITED (pid, wait status) follows when the copy exits.
 * Tags are the host's, echoed. Never returns.
 */
#define LR_SBX_ZYGOTE_MAGIC 0x6c727a31u /* "lrz1" */
struct lr_sbx_zygote_req {
	uint32_t magic;
	uint32_t nfds;
	uint64_t tag;
};
enum { LR_SBX_ZYGOTE_STARTED = 1, LR_SBX_ZYGOTE_FAILED = 2, LR_SBX_ZYGOTE_EXITED = 3 };
struct lr_sbx_zygote_msg {
	uint32_t type;
	int32_t pid;
	int32_t status; /* EXITED: as waitpid gives it */
	int32_t err;    /* FAILED: an errno */
	uint64_t tag;   /* STARTED, FAILED: the request's */
};
__attribute__((noreturn)) void lr_sbx_zygote_main(void);

/* ---- the spec's caps (sandbox/spec.c) ---- */

/* Caps the decoder enforces; a spec above any of them is refused. */
#define LR_SBX_SPEC_MAX (1 << 20)  /* bytes of JSON */
#define LR_SBX_MAX_ARGS 4096       /* entries of argv, and of envp */
#define LR_SBX_MAX_ARG (128 << 10) /* bytes of one argv or envp entry */
#define LR_SBX_MAX_MOUNTS 1024
#define LR_SBX_MAX_RULES 1024      /* Landlock rules, and readonly paths */
#define LR_SBX_SECCOMP_MAX (4096 * 8) /* bytes of the seccomp program (BPF_MAXINSNS) */

/* ---- files the host interprets later (sandbox/protect.c) ---- */

/*
 * Some files in a writable root are read later by programs on the host, and
 * run code there: git reads a repository's config, hooks, attributes and
 * the directories a .git file or commondir points at (and recurses into
 * submodules); editors, agents and CI read their own names (.vscode,
 * .envrc, .github/workflows ...). The scan finds, before a run, every git
 * directory below the writable roots (a .git directory, the target of a
 * .git file, a bare repository, the git directories of submodules under
 * modules/ and of linked worktrees) and what must stay as it is:
 *
 *   items   the interpreted files: existing ones are bound read-only;
 *           missing ones get a placeholder first (lr_protect_place: an empty
 *           file, "." for commondir, or an empty directory; made by the host
 *           with mode 0444 / 0555, bound read-only, removed after the run);
 *   binds   directories bound onto themselves (pins: every directory
 *           between a writable root and an item, so no parent can be
 *           renamed away and replaced) and directories bound read-only as a
 *           whole (modules/, or every git directory with git_readonly);
 *   zones   worktree roots (and writable roots inside a repository): after
 *           the run, a .git or a bare repository that appeared below one is
 *           moved aside (lr_protect_after), since host git would use it;
 *   tree    the directories walked, so the check after the run (and, given
 *           as the next scan's cache, the next run) reads again only the
 *           directories whose ctime changed;
 *   watch   protected names missing at the top of a repository below a
 *           writable root (no placeholder there): moved aside after the run
 *           if they appeared.
 *
 * The walk does not follow symbolic links; a protected entry that is a
 * symbolic link cannot be held (it can be replaced) and refuses the run,
 * as does a tree with more entries than the cap (never silently partial).
 */
#define LR_PROTECT_MAX_NAMES 64
#define LR_PROTECT_NAME_MAX 200
#define LR_PROTECT_MAX_ENTRIES 200000 /* the walk's default cap */
#define LR_PROTECT_MAX_DEPTH 128
#define LR_PROTECT_GITFILE_MAX 4096   /* bytes of a .git file that are read */

/* The default protected names, NULL-terminated: .vscode .idea .devcontainer
 * .cursor .claude .mcp.json .envrc .github/workflows. */
extern const char *const lr_protect_default_names[];
/* The interpreted files of a git directory, NULL-terminated: config,
 * config.worktree, commondir, hooks, info/attributes, objects/info/alternates,
 * modules. */
extern const char *const lr_protect_git_files[];

struct lr_protect_opts {
	const char *const *names;    /* the profile's, on top of the defaults */
	size_t nnames;
	int git_readonly;            /* every git directory read-only as a whole */
	size_t max_entries;          /* the walk's cap (0: LR_PROTECT_MAX_ENTRIES) */
	const char *const *granted;  /* the run's write grants (canonical paths): a */
	size_t ngranted;             /* protection a grant names is dropped */
	/* the tree of an earlier walk of the same roots (lr_protect_plan_take_tree),
	   or NULL: directories it still describes are not read again */
	const struct lr_protect_tree *cache;
};

enum lr_protect_kind { LR_PROTECT_RO = 0, LR_PROTECT_FILE = 1, LR_PROTECT_DIR = 2 };

struct lr_protect_item {
	char *path;
	enum lr_protect_kind kind; /* RO: bind the existing entry; FILE, DIR: a placeholder first */
	const char *content;       /* FILE: the placeholder's bytes (static) */
};

struct lr_protect_bind {
	char *path;
	int writable; /* 1: a pin (bound onto itself); 0: read-only as a whole */
};

struct lr_protect_plan {
	struct lr_protect_item *items;
	size_t nitems, icap;
	struct lr_protect_bind *binds;
	size_t nbinds, bcap;
	char **gitdirs, **dotgits, **zones, **watch; /* gitdirs and dotgits sorted by lr_protect_scan */
	size_t ngitdirs, ndotgits, nzones, nwatch;
	size_t gcap, dcap, zcap, wcap;
	size_t entries;   /* directory entries the writable roots hold */
	size_t dirs_read; /* directories the last walk read (the others were reused) */
	struct lr_protect_tree *tree; /* the walk's tree (after lr_protect_after: the new one) */
};

/*
 * Scans the writable roots (canonical directories). 0, LR_EREFUSED with a
 * message (a symbolic link where a protected entry is, more entries than
 * the cap, a tree deeper than LR_PROTECT_MAX_DEPTH), or -ENOMEM. The plan
 * is released and zeroed on failure.
 */
int lr_protect_scan(const char *const *roots, size_t nroots, const struct lr_protect_opts *o,
		    struct lr_protect_plan *plan, struct lr_err *err);
void lr_protect_plan_release(struct lr_protect_plan *p);

/*
 * Makes the plan's placeholders (those missing) and holds each of them with
 * a shared lock for the length of the run; an existing placeholder of
 * another run is held too. Fails closed (-errno, message) when one cannot
 * be made. lr_protect_unplace removes the placeholders no other run holds
 * (an emptied directory or the exact placeholder bytes only) and frees h.
 */
struct lr_protect_hold;
int lr_protect_place(const struct lr_protect_plan *p, struct lr_protect_hold **out,
		     struct lr_err *err);
void lr_protect_unplace(struct lr_protect_hold *h);

/*
 * After a run: below every zone, a .git entry the scan did not see and a
 * directory that became a bare repository (HEAD, objects/, refs/) are moved
 * aside (renamed to NAME.luarig-quarantine, or -N), as are watched names
 * that appeared. One line per move is added to moved ("'PATH' moved to
 * 'NEW': why"). 0, or -errno / LR_ETOOBIG (the tree outgrew the check's cap:
 * what was checked was still moved) with a message.
 */
int lr_protect_after(struct lr_protect_plan *p, const struct lr_protect_opts *o,
		     struct lr_buf *moved, struct lr_err *err);

/*
 * The directories of the writable roots as a walk saw them (device, inode,
 * ctime, entries): a later walk reuses a directory whose device, inode and
 * ctime are unchanged (changed within two seconds of a walk, or on NFS,
 * SMB, FUSE, 9p …: read again). take_tree hands the plan's to the caller
 * (NULL when there is none) to pass as lr_protect_opts.cache.
 */
struct lr_protect_tree;
struct lr_protect_tree *lr_protect_plan_take_tree(struct lr_protect_plan *p);
void lr_protect_tree_free(struct lr_protect_tree *t);

/*
 * For the host's own writers (the file tools): 1 when writing rel (a
 * relative path without "." or ".." components) beneath root would touch
 * what the scan protects, or create a repository: a ".git" component at any
 * depth, a path inside an existing git directory, a name of the list at
 * the top of root or of a repository in it, a file the config of a
 * repository above it includes. why names the rule. 0 when not, -errno on
 * a failed lookup. No walk: a file one repository's config includes from
 * outside that repository's own tree is held by the sandbox's scan only.
 */
int lr_protect_path(const char *root, const char *rel, const struct lr_protect_opts *o,
		    struct lr_err *why);

/*
 * The keys of a git config file that name files git runs or reads as
 * config (core.hooksPath; include.path and includeIf.*.path), each value
 * given to found as git reads it. 0, or -EINVAL at a line git would refuse
 * (what came before it was given). protect_gitdir protects the files they
 * name inside writable roots, reading included files the same way.
 */
enum lr_protect_key { LR_PROTECT_HOOKSPATH = 1, LR_PROTECT_INCLUDE = 2 };
int lr_protect_config_paths(const char *buf, size_t len,
			    void (*found)(void *arg, enum lr_protect_key key, const char *value),
			    void *arg);

/* A .git file's target ("gitdir: PATH", trailing CR/LF dropped) into out; -EINVAL when it is not one. */
int lr_protect_gitfile(const char *buf, size_t len, char *out, size_t outlen);

/* Checks a protected name (profile field and file tools): relative, no "." or ".." component,
 * no empty component, at most LR_PROTECT_NAME_MAX bytes of printable ASCII. 0 or -EINVAL. */
int lr_protect_name_check(const char *name);

/* ---- grants (sandbox/grant.c) ---- */

/*
 * A grant opens exactly one approved delta for one spawn. The host mints it
 * after a gate approval; the executor redeems it when it builds the spec.
 */
enum lr_grant_class { LR_GRANT_FS_READ, LR_GRANT_FS_WRITE, LR_GRANT_NETWORK, LR_GRANT_COMMAND };

struct lr_grant_req {
	uint64_t exec_id;          /* the execution it is for */
	const char *command;       /* the exact command line */
	const char *cwd;
	const char *fingerprint;   /* the profile's */
	enum lr_grant_class cls;
	const char *target;        /* a path (pinned by device and inode when minted) or host:port */
	double ttl;                /* seconds until it expires */
};

struct lr_grants;
int lr_grants_new(struct lr_grants **out);
void lr_grants_free(struct lr_grants *g);
/* Mints a single-use token (32 hex chars) into token. */
int lr_grant_mint(struct lr_grants *g, const struct lr_grant_req *r, char token[33],
		  struct lr_err *err);
/*
 * Redeems a token for a spawn described by r (ttl ignored): refused with
 * LR_EREFUSED and a message saying which binding failed ("grant: already
 * used", "grant: expired", "grant: for another command", "... another
 * directory", "... another execution", "... another profile", "grant: the
 * target changed since approval"). A token is consumed by its first
 * redemption attempt that names it, successful or not.
 */
int lr_grant_redeem(struct lr_grants *g, const char *token, const struct lr_grant_req *r,
		    struct lr_err *err);

/* ---- netfds: the proxy's listeners, made inside the sandbox (sandbox/netfds.c) ---- */

/*
 * Called by the confinement helper INSIDE the target's new network
 * namespace (LR_SBX_NET_PROXY), before it drops privileges: brings "lo" up
 * if it is down (idempotent), binds a TCP listener on 127.0.0.1:proxy_port
 * (backlog 64) and a UDP socket on 127.0.0.1:dns_port (0 picks a free port:
 * tests), sends both over the UNIX socket control_fd in ONE message (one
 * payload byte 'L', SCM_RIGHTS: the TCP fd first, then the UDP fd) and
 * closes its own copies. Returns 0 or -errno (nothing is sent on failure).
 * The descriptors it creates are O_CLOEXEC, so the target never holds them.
 */
int lr_sbx_make_listeners(uint16_t proxy_port, uint16_t dns_port, int control_fd);
/*
 * The host side: receives that message from control_fd (blocking unless
 * control_fd is non-blocking, then -EAGAIN when nothing is there yet;
 * LR_ECLOSED on EOF: the helper died before sending). Checks what came:
 * exactly two descriptors, the first a listening TCP socket
 * (SO_TYPE SOCK_STREAM, SO_ACCEPTCONN 1), the second a UDP socket
 * (SOCK_DGRAM), both AF_INET bound to a loopback address; anything else is
 * refused with -EPROTO and every received descriptor is closed. On success
 * *tcp and *udp are set O_CLOEXEC|O_NONBLOCK and owned by the caller (hand
 * them to lr_egress_open in host/egress.h).
 */
int lr_sbx_recv_listeners(int control_fd, int *tcp, int *udp);
/*
 * One message of len bytes on the UNIX socket sock with fds[0..n-1] as
 * SCM_RIGHTS (n at most 8; 0: none), MSG_NOSIGNAL and flags added, retried
 * on EINTR: 0, or -errno (-EIO when it went out short).
 */
int lr_sbx_send_fds(int sock, const void *buf, size_t len, const int *fds, int n, int flags);

/* ---- the spec of one run (sandbox/build.c) ---- */

/*
 * What the executor (host/executor.c) asks of one run, and what it knows of
 * the executor running it, become one lr_sbx_spec here: a pure mapping of
 * profile, caps, request and context, unit-tested without a loop.
 */
/* A grant token with what it is for (its class and target). */
struct lr_exec_grant {
	const char *token;
	int cls;            /* enum lr_grant_class */
	const char *target; /* a path or "host:port" */
};

/* What one run asks for. Everything is borrowed for the call. */
struct lr_exec_request {
	char *const *argv;       /* NULL-terminated; or NULL with command */
	const char *command;     /* run as /bin/sh -c command */
	const char *cwd;         /* NULL: the workspace root (or HOME without a workspace) */
	char *const *env;        /* "NAME=value" passed explicitly (kept even if secret-looking);
				    "NAME" alone removes NAME; NULL-terminated or NULL */
	const struct lr_exec_grant *grants;
	size_t ngrants;
	char *const *network;    /* "host:port" targets wanted; NULL-terminated or NULL */
	double timeout;          /* seconds; 0: none */
	size_t output_limit;     /* per stream, head + tail (0: 1 MiB) */
	const void *stdin_data;  /* piped to the command, then closed; NULL: /dev/null */
	size_t stdin_len;
	int inherit_stdio;       /* 1: fds 0, 1, 2 are the host's (the CLI); nothing captured */
};

/*
 * The dirs of one executor and the grants it redeemed, as the spec builder
 * sees them. granted_* lists are what redeemed grants opened (absolute
 * paths; "host:port"), command_granted says a gated command was approved.
 */
struct lr_exec_ctx {
	uint64_t exec_id;
	const char *home, *tmpdir;   /* absolute, existing */
	char *const *host_env;       /* the host's environment (environ) */
	const char *const *granted_read;
	size_t ngranted_read;
	const char *const *granted_write;
	size_t ngranted_write;
	const char *const *granted_net;
	size_t ngranted_net;
	int command_granted;
	uint16_t proxy_port, dns_port; /* non-zero: network targets go through the proxy */
	/* out, or NULL: the scan of the writable roots (sandbox/protect.c) that
	   the spec's protected binds came from, for the launch's placeholders
	   and the check after the run; zeroed by the caller, released by it
	   (build_spec releases it when it fails) */
	struct lr_protect_plan *plan;
	/* an earlier walk of the same roots (lr_protect_opts.cache), or NULL */
	const struct lr_protect_tree *protect_cache;
};

/*
 * Builds the spec for one run into out (owned by the caller: release with
 * lr_sbx_spec_release). The mount view: /usr /bin /sbin /lib /lib32 /lib64
 * /etc /opt /srv read-only when present and host_read is allow; the
 * workspace read-write when workspace_write is allow (or gated and
 * granted), else read-only when workspace_read is allow (or gated and
 * granted); extra roots by their states; granted paths; HOME and TMPDIR
 * read-write at their own paths; the real home only with home=real.
 * Landlock rules match the mounts (read + execute on read-only roots, every
 * write right incl. REFER on writable ones, plus /dev, /proc and /tmp of the
 * view). Inside the writable roots (the workspace, extra roots, granted
 * paths), what the host interprets later stays as it is: the plan of
 * lr_protect_scan (sandbox.h) becomes pins and read-only directories among
 * the mounts and read-only paths (the git files of every repository at any
 * depth, the protected names), or the run is refused (LR_EREFUSED: a tier
 * without a mount view, a symbolic link where a protected entry is, a tree
 * beyond the walk's cap, more binds than the spec holds). The environment is scrubbed (see build.c); argv[0]
 * is resolved on the view's PATH. Errors: LR_EREFUSED (command or network
 * not allowed, cwd outside the view), LR_ENOTFOUND (no such command),
 * -errno; err says which.
 */
int lr_sbx_build_spec(const struct lr_profile *p, const struct lr_sbx_caps *caps,
			   const struct lr_exec_request *r, const struct lr_exec_ctx *ctx,
			   struct lr_sbx_spec *out, struct lr_err *err);
/* The command line a grant of class command binds to: command, or argv joined by spaces. */
int lr_sbx_command_line(const struct lr_exec_request *r, struct lr_buf *out);

#endif
