//! Failovers on demand, for the over-admission suite (`store_failover.rs`):
//! a Redis Cluster of 3 masters each with one replica, and a way to leave
//! a replica behind its master by exactly the writes that follow. Not
//! glob-exported by `common`.
//!
//! Leaving a replica behind: the master is given a password its replica
//! does not know (`CONFIG SET requirepass`) and the replication link is cut
//! (`CLIENT KILL TYPE replica`). The replica keeps answering (so Sentinel
//! and the cluster still count it as a good candidate) but cannot sync
//! again; every write after that lives on the master alone. Connections
//! made before (the gateways', the sentinels') stay authenticated.
//! Stopping the replica (SIGSTOP) does not do it: what the master sent
//! before dying still sits in the replica's socket buffer and is applied
//! when it resumes.

use super::*;

/// The password that locks a replica out of its master.
pub const LOCK: &str = "replica-locked-out";

/// Returns once `master_port`'s replica holds every write so far (`WAIT`),
/// then cuts it off: later writes reach the master only.
pub async fn leave_replica_behind(master_port: u16) {
    let acked = redis_cli(master_port, &["WAIT", "1", "5000"]).unwrap_or_default();
    assert_eq!(
        acked.trim(),
        "1",
        "the replica of {master_port} did not catch up"
    );
    let set = redis_cli(master_port, &["CONFIG", "SET", "requirepass", LOCK]).unwrap();
    assert_eq!(set.trim(), "OK");
    let info = |args: &[&str]| data_cli(master_port, Some(LOCK), args).unwrap_or_default();
    info(&["CLIENT", "KILL", "TYPE", "replica"]);
    let cut = eventually(Duration::from_secs(5), || async {
        info(&["INFO", "replication"]).contains("connected_slaves:0")
    })
    .await;
    assert!(cut, "the replica of {master_port} is still linked");
}

/// Lets the replica sync again (the master's password removed).
pub fn let_replica_back(master_port: u16) {
    let _ = data_cli(
        master_port,
        Some(LOCK),
        &["CONFIG", "SET", "requirepass", ""],
    );
}

/// Whether `port` is a master with one replica online.
pub fn has_replica(port: u16) -> bool {
    redis_cli(port, &["INFO", "replication"]).is_some_and(|i| {
        i.contains("role:master") && i.contains("connected_slaves:1") && i.contains("state=online")
    })
}

/// `ROLE`'s first line: `master` or `slave`.
pub fn role(port: u16) -> String {
    redis_cli(port, &["ROLE"])
        .and_then(|r| r.lines().next().map(str::to_string))
        .unwrap_or_default()
}

/// The arguments every node of the cluster starts with (and restarts with).
pub const CLUSTER_ARGS: [&str; 8] = [
    "--cluster-enabled",
    "yes",
    "--cluster-config-file",
    "nodes.conf",
    "--cluster-node-timeout",
    "1000",
    "--logfile",
    "redis.log",
];

/// 3 masters, each with one replica, on free loopback ports.
pub struct ReplicatedCluster {
    pub nodes: Vec<Redis>,
}

impl ReplicatedCluster {
    pub async fn start() -> ReplicatedCluster {
        let mut nodes = Vec::new();
        for _ in 0..6 {
            nodes.push(Redis::start_with(&CLUSTER_ARGS).await);
        }
        let ports: Vec<u16> = nodes.iter().map(|n| n.port).collect();
        super::redis::create_cluster(&[], &ports, 1);
        let cluster = ReplicatedCluster { nodes };
        let ok = eventually(Duration::from_secs(30), || async {
            cluster.healthy() && cluster.masters().iter().all(|m| has_replica(*m))
        })
        .await;
        assert!(ok, "the cluster did not settle with a replica per master");
        cluster
    }

    pub fn urls(&self) -> Vec<String> {
        let urls = self
            .nodes
            .iter()
            .map(|n| format!("redis://127.0.0.1:{}", n.port));
        urls.collect()
    }

    /// Every live node says the cluster serves every slot.
    pub fn healthy(&self) -> bool {
        self.nodes.iter().all(|n| {
            redis_cli(n.port, &["CLUSTER", "INFO"]).is_some_and(|i| i.contains("cluster_state:ok"))
        })
    }

    pub fn masters(&self) -> Vec<u16> {
        let ports = self.nodes.iter().map(|n| n.port);
        ports.filter(|p| role(*p) == "master").collect()
    }

    /// The master serving `key`'s slot.
    pub fn owner(&self, key: &str) -> u16 {
        let any = self.nodes[0].port;
        let slot = redis_cli(any, &["CLUSTER", "KEYSLOT", key]).unwrap();
        let slot: u16 = slot.trim().parse().unwrap();
        let out = redis_cli(any, &["CLUSTER", "SLOTS"]).unwrap();
        // Ranges: start, end, then the master's ip and port (and id), then replicas.
        let lines: Vec<&str> = out.lines().map(str::trim).collect();
        for w in lines.windows(4) {
            if let (Ok(start), Ok(end), Ok(port)) = (
                w[0].parse::<u16>(),
                w[1].parse::<u16>(),
                w[3].parse::<u16>(),
            ) {
                if w[2] == "127.0.0.1" && (start..=end).contains(&slot) {
                    return port;
                }
            }
        }
        panic!("no owner of slot {slot} in\n{out}")
    }

    /// The replica of the master at `master`.
    pub fn replica_of(&self, master: u16) -> u16 {
        let ports = self.nodes.iter().map(|n| n.port);
        let mut replicas = ports.filter(|p| {
            let role = redis_cli(*p, &["ROLE"]).unwrap_or_default();
            let mut l = role.lines();
            l.next() == Some("slave") && l.nth(1).map(str::trim) == Some(&master.to_string())
        });
        replicas.next().expect("a replica")
    }

    /// The slot of `key`.
    pub fn slot(&self, key: &str) -> u16 {
        let slot = redis_cli(self.nodes[0].port, &["CLUSTER", "KEYSLOT", key]).unwrap();
        slot.trim().parse().unwrap()
    }

    /// Resharding, step 1 of 3 (as `redis-cli --cluster reshard` does it):
    /// `to` imports `slots` and `from` migrates them; the keys stay on
    /// `from`, and a key `from` lacks is answered with `ASK` for `to`.
    pub fn migrating(&self, slots: &[u16], from: u16, to: u16) {
        let (from_id, to_id) = (node_id(from), node_id(to));
        for slot in slots.iter().map(u16::to_string) {
            let set = |port, state, id: &str| {
                let ok = redis_cli(port, &["CLUSTER", "SETSLOT", &slot, state, id]);
                assert_eq!(ok.as_deref().map(str::trim), Some("OK"), "SETSLOT {state}");
            };
            set(to, "IMPORTING", &from_id);
            set(from, "MIGRATING", &to_id);
        }
    }

    /// Step 2: every key of `slots` moves from `from` to `to` (`MIGRATE`);
    /// every call for them is now answered with `ASK`.
    pub fn migrate_keys(&self, slots: &[u16], from: u16, to: u16) {
        for slot in slots.iter().map(u16::to_string) {
            let keys = redis_cli(from, &["CLUSTER", "GETKEYSINSLOT", &slot, "1000"]).unwrap();
            let keys: Vec<&str> = keys
                .lines()
                .map(str::trim)
                .filter(|k| !k.is_empty())
                .collect();
            if keys.is_empty() {
                continue;
            }
            let to = to.to_string();
            let args = [
                &["MIGRATE", "127.0.0.1", &to, "", "0", "5000", "KEYS"],
                &keys[..],
            ];
            let ok = redis_cli(from, &args.concat()).unwrap_or_default();
            assert_eq!(ok.trim(), "OK", "MIGRATE of slot {slot}");
        }
    }

    /// Step 3: every master says `to` owns `slots` (`MOVED` from now on).
    pub fn assign(&self, slots: &[u16], to: u16) {
        let to_id = node_id(to);
        let masters = self.masters();
        for slot in slots.iter().map(u16::to_string) {
            // The new owner first, then the others, as redis-cli does.
            for port in std::iter::once(to).chain(masters.iter().copied().filter(|p| *p != to)) {
                let ok = redis_cli(port, &["CLUSTER", "SETSLOT", &slot, "NODE", &to_id]);
                assert_eq!(ok.as_deref().map(str::trim), Some("OK"), "SETSLOT NODE");
            }
        }
    }

    /// The last lines of a node's log (in its directory), for a failure message.
    pub fn log_tail(&self, port: u16) -> String {
        let node = self.nodes.iter().find(|n| n.port == port).unwrap();
        let log = std::fs::read_to_string(node.dir.path().join("redis.log")).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }

    pub fn node(&mut self, port: u16) -> &mut Redis {
        self.nodes.iter_mut().find(|n| n.port == port).unwrap()
    }
}

/// A cluster node's id (`CLUSTER MYID`).
pub fn node_id(port: u16) -> String {
    redis_cli(port, &["CLUSTER", "MYID"])
        .unwrap()
        .trim()
        .to_string()
}
