//! Launcher environment, configuration, names.

use super::*;

/// The variables `detect` reads beside the launcher families' (below),
/// except `MASTER_ADDR` (which is resolved, and so only ever given
/// addresses that need no DNS).
const OTHER_LAUNCH_VARS: &[&str] = &[
    "STREAMCOMM_LAUNCHER",
    "STREAMCOMM_UNIQUE_ID",
    "MASTER_PORT",
    "STREAMCOMM_ROOT_PORT",
    "TORCHELASTIC_RUN_ID",
    "STREAMCOMM_SECRET",
];

/// Every variable `detect` reads, except `MASTER_ADDR`.
fn launch_vars() -> Vec<&'static str> {
    let families = LAUNCH_FAMILIES.iter().flat_map(|f| f.iter());
    families.chain(OTHER_LAUNCH_VARS).copied().collect()
}

/// `MASTER_ADDR` values that resolve without a name server: IP literals in
/// every accepted spelling, and garbage made unresolvable by a NUL byte.
fn master_addr() -> BoxedStrategy<String> {
    prop_oneof![
        any::<[u8; 4]>().prop_map(|ip| Ipv4Addr::from(ip).to_string()),
        bytes_n::<16>().prop_map(|ip| Ipv6Addr::from(ip).to_string()),
        bytes_n::<16>().prop_map(|ip| format!("[{}]", Ipv6Addr::from(ip))),
        any::<[u8; 4]>().prop_map(|ip| format!("  {}\n", Ipv4Addr::from(ip))),
        ".{0,16}".prop_map(|s| format!("{s}\0")),
        Just(" ".to_string()),
    ]
    .boxed()
}

/// The variables of each launcher family, rank and size first.
const LAUNCH_FAMILIES: &[&[&str]] = &[
    &["RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"],
    &[
        "SLURM_PROCID",
        "SLURM_NTASKS",
        "SLURM_NPROCS",
        "SLURM_LOCALID",
        "SLURM_NTASKS_PER_NODE",
        "SLURM_TASKS_PER_NODE",
        "SLURM_NODEID",
        "SLURM_NNODES",
    ],
    &[
        "OMPI_COMM_WORLD_RANK",
        "OMPI_COMM_WORLD_SIZE",
        "OMPI_COMM_WORLD_LOCAL_RANK",
        "OMPI_COMM_WORLD_LOCAL_SIZE",
    ],
    &[
        "PMI_RANK",
        "PMI_SIZE",
        "MPI_LOCALRANKID",
        "PMI_LOCAL_RANK",
        "MPI_LOCALNRANKS",
        "PMI_LOCAL_SIZE",
    ],
];

/// The root's variables: a unique id, or an address, port and secret.
fn root_vars() -> BoxedStrategy<Vec<(&'static str, String)>> {
    let port = prop_oneof![
        8 => (1u32..65536).prop_map(|p| p.to_string()),
        1 => env_value(),
    ];
    prop_oneof![
        1 => unique_id_text().prop_map(|id| vec![("STREAMCOMM_UNIQUE_ID", id)]),
        2 => (
            prop_oneof![
                3 => any::<[u8; 4]>().prop_map(|ip| Ipv4Addr::from(ip).to_string()),
                1 => master_addr(),
            ],
            port.clone(),
            prop::option::of(prop_oneof![
                3 => "[0-9a-fA-F]{32}".boxed(),
                1 => env_value().boxed()
            ]),
            prop::option::of(Just("run-1".to_string())),
            prop::option::of(port),
        )
            .prop_map(|(addr, port, secret, torch, root_port)| {
                let mut v = vec![("MASTER_ADDR", addr), ("MASTER_PORT", port)];
                v.extend(secret.map(|s| ("STREAMCOMM_SECRET", s)));
                v.extend(torch.map(|t| ("TORCHELASTIC_RUN_ID", t)));
                v.extend(root_port.map(|p| ("STREAMCOMM_ROOT_PORT", p)));
                v
            }),
    ]
    .boxed()
}

/// A launcher environment: either any of the variables with fuzzed values,
/// or one launcher's variables with mostly small numbers and a root (so that
/// many cases get all the way through), plus a stray variable or two.
fn launch_env() -> BoxedStrategy<BTreeMap<String, String>> {
    let anything = (
        prop::collection::btree_map(prop::sample::select(launch_vars()), env_value(), 0..10),
        prop::option::of(master_addr()),
    )
        .prop_map(|(vars, addr)| {
            let mut map: BTreeMap<String, String> =
                vars.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
            if let Some(addr) = addr {
                map.insert("MASTER_ADDR".into(), addr);
            }
            map
        });
    let small = prop_oneof![
        10 => (0u8..4).prop_map(|n| n.to_string()),
        1 => slurm_task_list(),
        1 => env_value(),
    ];
    let launcher = (
        prop::sample::select(LAUNCH_FAMILIES.to_vec()),
        prop::collection::vec((prop::bool::weighted(0.85), small), 8),
        root_vars(),
        prop::collection::btree_map(prop::sample::select(launch_vars()), env_value(), 0..2),
        prop::option::of(prop_oneof![
            Just("streamcomm-run".to_string()),
            Just("torchrun".to_string())
        ]),
    )
        .prop_map(|(family, values, root, stray, name)| {
            let mut map = BTreeMap::new();
            for (var, (present, value)) in family.iter().zip(values) {
                if present {
                    map.insert(var.to_string(), value);
                }
            }
            map.extend(root.into_iter().map(|(k, v)| (k.to_string(), v)));
            map.extend(stray.into_iter().map(|(k, v)| (k.to_string(), v)));
            if let Some(name) = name {
                map.insert("STREAMCOMM_LAUNCHER".into(), name);
            }
            map
        });
    // Consistent figures under one launcher's names, one of them perhaps
    // replaced by a fuzzed value.
    let consistent = (
        prop::sample::select(vec![
            ["RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"],
            [
                "SLURM_PROCID",
                "SLURM_NTASKS",
                "SLURM_LOCALID",
                "SLURM_NTASKS_PER_NODE",
            ],
            [
                "OMPI_COMM_WORLD_RANK",
                "OMPI_COMM_WORLD_SIZE",
                "OMPI_COMM_WORLD_LOCAL_RANK",
                "OMPI_COMM_WORLD_LOCAL_SIZE",
            ],
            ["PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"],
        ]),
        (1usize..9)
            .prop_flat_map(|size| (Just(size), 0..size, 1..=size))
            .prop_flat_map(|(size, rank, local_size)| {
                (Just((size, rank, local_size)), 0..local_size)
            }),
        root_vars(),
        prop::option::of((0usize..4, env_value())),
    )
        .prop_map(
            |(names, ((size, rank, local_size), local_rank), root, fuzz)| {
                let mut values = [rank, size, local_rank, local_size].map(|n| n.to_string());
                if let Some((i, v)) = fuzz {
                    values[i] = v;
                }
                let mut map: BTreeMap<String, String> = names
                    .iter()
                    .zip(values)
                    .map(|(k, v)| (k.to_string(), v))
                    .collect();
                map.extend(root.into_iter().map(|(k, v)| (k.to_string(), v)));
                map
            },
        );
    prop_oneof![1 => anything.boxed(), 2 => launcher.boxed(), 2 => consistent.boxed()].boxed()
}

/// Every variable `Config::with_vars` reads.
const CONFIG_VARS: &[&str] = &[
    "STREAMCOMM_BUFFSIZE",
    "STREAMCOMM_NSTEPS",
    "STREAMCOMM_TIMEOUT",
    "STREAMCOMM_PROGRESS",
    "STREAMCOMM_SPIN",
    "STREAMCOMM_BARRIER_ALGO",
    "STREAMCOMM_HOSTS_OVERRIDE",
    "STREAMCOMM_TRANSPORT",
    "STREAMCOMM_NCHANNELS",
    "STREAMCOMM_SOCKET_IFNAME",
    "STREAMCOMM_DEBUG",
];

/// Values aimed at the config parsers, plus the generic ones.
fn config_value() -> BoxedStrategy<String> {
    prop_oneof![
        env_value(),
        (
            0u64..5000,
            prop::sample::select(vec!["", "k", "K", "m", "M", "g", "G"])
        )
            .prop_map(|(n, unit)| format!("{n}{unit}")),
        any::<f64>().prop_map(|f| f.to_string()),
        (0.0f64..1e6).prop_map(|f| format!("{f}")),
        prop::sample::select(vec![
            "inline", "PROXY", "auto", "shm", "tcp", "", "nan", "inf", "-0", "0.0"
        ])
        .prop_map(str::to_string),
        barrier_algo_text(),
        hosts_text(),
    ]
    .boxed()
}

/// Names of barrier algorithms, real and mangled.
fn barrier_algo_text() -> BoxedStrategy<String> {
    let family = prop::sample::select(vec![
        "central_counter",
        "central_flags",
        "chain",
        "tree",
        "dissemination",
        "kway",
        "hierarchical",
        "hierarchical:tree",
        "hierarchical:dissemination",
        "Tree",
        "KWAY",
        "",
        "auto",
    ]);
    let param = prop_oneof![
        Just(String::new()),
        (0u64..10).prop_map(|k| format!(":{k}")),
        any::<u64>().prop_map(|k| format!(":{k}")),
        ":[^:]{0,6}".boxed(),
        Just(":4:4".to_string()),
        Just("::".to_string()),
    ];
    (family, param, any::<bool>())
        .prop_map(|(f, p, pad)| {
            if pad {
                format!("  {f}{p} ")
            } else {
                format!("{f}{p}")
            }
        })
        .boxed()
}

/// Host override texts: counts and label lists.
fn hosts_text() -> BoxedStrategy<String> {
    prop_oneof![
        (0u64..100).prop_map(|k| k.to_string()),
        prop::collection::vec("[a-c ]{0,3}", 0..6).prop_map(|l| l.join(",")),
        "[a-z0-9, ]{0,20}",
    ]
    .boxed()
}

/// Any valid barrier algorithm.
fn barrier_algo() -> BoxedStrategy<BarrierAlgo> {
    prop_oneof![
        Just(BarrierAlgo::CentralCounter),
        Just(BarrierAlgo::CentralFlags),
        Just(BarrierAlgo::Chain),
        (2usize..=usize::MAX).prop_map(|fanout| BarrierAlgo::Tree { fanout }),
        Just(BarrierAlgo::Dissemination),
        (1usize..=usize::MAX).prop_map(|k| BarrierAlgo::KWayDissemination { k }),
        Just(BarrierAlgo::Hierarchical {
            inter: Inter::Dissemination
        }),
        (2usize..=usize::MAX).prop_map(|fanout| BarrierAlgo::Hierarchical {
            inter: Inter::Tree { fanout }
        }),
    ]
    .boxed()
}

/// Randomly re-cases ASCII letters, as the name parsers ignore case.
fn recase(s: &str, mask: u64) -> String {
    s.chars()
        .enumerate()
        .map(|(i, c)| {
            if mask >> (i % 64) & 1 == 1 {
                c.to_ascii_uppercase()
            } else {
                c
            }
        })
        .collect()
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn launch_detect_never_panics(vars in launch_env()) {
        let get = |k: &str| vars.get(k).cloned();
        if let Ok(info) = detect(&get) {
            prop_assert!(info.rank < info.size, "{:?}", info);
            prop_assert!(info.local_rank < info.local_size, "{:?}", info);
            prop_assert!(info.local_size <= info.size, "{:?}", info);
            prop_assert!(
                ["streamcomm-run", "torchrun", "slurm", "openmpi", "pmi"].contains(&info.launcher)
            );
            let has_id = vars
                .get("STREAMCOMM_UNIQUE_ID")
                .is_some_and(|v| !v.trim().is_empty());
            prop_assert_eq!(matches!(info.root, RootSpec::UniqueId(_)), has_id);
        }
    }

    #[test]
    fn config_with_arbitrary_vars(
        vars in prop::collection::btree_map(prop::sample::select(CONFIG_VARS), config_value(), 0..6)
    ) {
        let get = |k: &str| vars.get(k).cloned();
        if let Ok(c) = Config::default().with_vars(get) {
            prop_assert!(c.validate().is_ok(), "{:?}", c);
            prop_assert!(c.slot_bytes() >= 64 && c.slot_bytes() % 64 == 0);
        }
    }

    #[test]
    fn hosts_override_parse(text in prop_oneof![".{0,30}".boxed(), hosts_text().boxed()], size in 0usize..300) {
        match HostsOverride::parse(&text) {
            Ok(HostsOverride::RanksPerHost(k)) => {
                prop_assert!(k > 0);
                prop_assert_eq!(HostsOverride::RanksPerHost(k).labels(size).expect("labels").len(), size);
            }
            Ok(HostsOverride::Labels(labels)) => {
                prop_assert!(!labels.is_empty());
                for l in &labels {
                    prop_assert!(!l.is_empty() && !l.contains(',') && l.trim() == l, "{:?}", l);
                }
                // Written back, the list parses to itself.
                let again = HostsOverride::parse(&labels.join(",")).expect("re-parse");
                prop_assert_eq!(again, HostsOverride::Labels(labels.clone()));
                let got = HostsOverride::Labels(labels.clone()).labels(size);
                prop_assert_eq!(got.is_ok(), labels.len() == size);
            }
            Err(e) => prop_assert!(matches!(e, Error::InvalidArgument(_))),
        }
    }

    #[test]
    fn barrier_algo_parse_arbitrary(text in prop_oneof![".{0,30}".boxed(), barrier_algo_text().boxed()]) {
        if let Ok(algo) = BarrierAlgo::parse(&text) {
            prop_assert!(algo.validate().is_ok());
            prop_assert_eq!(BarrierAlgo::parse(&algo.to_string()).expect("re-parse"), algo);
        }
    }

    #[test]
    fn barrier_algo_round_trips(algo in barrier_algo(), mask in any::<u64>()) {
        let text = recase(&algo.to_string(), mask);
        prop_assert_eq!(BarrierAlgo::parse(&format!(" {text}\t")).expect("parse"), algo);
    }

    #[test]
    fn data_type_and_reduce_op_names(text in ".{0,12}", mask in any::<u64>(), byte in any::<u8>()) {
        if let Some(t) = DataType::parse(&text) {
            prop_assert_eq!(DataType::parse(t.name()), Some(t));
        }
        if let Some(op) = ReduceOp::parse(&text) {
            prop_assert_eq!(ReduceOp::parse(op.name()), Some(op));
        }
        for t in DataType::ALL {
            prop_assert_eq!(DataType::parse(&recase(t.name(), mask)), Some(t));
        }
        for op in ReduceOp::ALL {
            prop_assert_eq!(ReduceOp::parse(&recase(op.name(), mask)), Some(op));
        }
        if let Some(t) = DataType::from_u8(byte) {
            prop_assert_eq!(t as u8, byte);
        }
        if let Some(op) = ReduceOp::from_u8(byte) {
            prop_assert_eq!(op as u8, byte);
        }
    }
}

/// Regression for a bug found by the fuzzer: a finite `STREAMCOMM_TIMEOUT`
/// too large for a `Duration` (e.g. `1e20` seconds) panics in
/// `Duration::from_secs_f64` inside `Config::with_vars` (config/mod.rs) instead
/// of returning `Error::InvalidArgument`.
#[test]
fn bug_config_huge_timeout_panics() {
    for v in [
        "1e20",
        "18446744073709551616",
        "1.8446744073709552e19",
        "1e308",
    ] {
        let r = Config::default().with_vars(|k| (k == "STREAMCOMM_TIMEOUT").then(|| v.to_string()));
        assert!(matches!(r, Err(Error::InvalidArgument(_))), "{v}: {r:?}");
    }
}

/// Regression for a bug found by the fuzzer: `STREAMCOMM_SPIN` is parsed as
/// a `usize` and cast to `u32`, so `4294967296` silently becomes 0 (and
/// `4294967297` becomes 1) instead of being rejected.
#[test]
fn bug_config_spin_truncates() {
    let r = Config::default().with_vars(|k| (k == "STREAMCOMM_SPIN").then(|| "4294967296".into()));
    assert!(matches!(r, Err(Error::InvalidArgument(_))), "{r:?}");
}
