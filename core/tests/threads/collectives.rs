//! The full collective matrix, ranks as threads over the real shared-memory
//! transport and host streams: every collective × N in {1,2,3,4,5,8} × dtypes
//! × ops × counts {0, 1, 7, slot-1, slot+1, 3×BUFFSIZE+13} × in/out of place.
//! From 5 ranks on, each collective and dtype takes one op, in turn, rather
//! than all of them: every op is still reduced by every collective, and the
//! whole product has run on 1 to 4 ranks (and in the simulator on up to 64).
//! Fresh random data every run, f64 references, every element checked,
//! outputs poisoned first.

use crate::harness;

use std::time::Duration;

use harness::{Case, collectives, reduces, run_case, run_threads, small_config};
use streamcomm::Collective;
use streamcomm::host::HostStream;
use streamcomm::{DataType, ReduceOp};
use streamcomm_testkit::seed;

const DTYPES: [DataType; 6] = [
    DataType::F32,
    DataType::F64,
    DataType::Bf16,
    DataType::F16,
    DataType::I32,
    DataType::U8,
];

fn counts(dtype: DataType) -> Vec<usize> {
    let config = small_config();
    let slot = config.slot_bytes() / dtype.size();
    vec![0, 1, 7, slot - 1, slot + 1, 3 * config.buffsize + 13]
}

fn matrix(n: usize) {
    let base = seed();
    let results = run_threads(n, small_config(), Duration::from_secs(600), move |comm| {
        let stream = HostStream::new().unwrap();
        let mut cases = 0usize;
        for (ci, collective) in collectives(n).into_iter().enumerate() {
            for (di, dtype) in DTYPES.into_iter().enumerate() {
                let ops: &[ReduceOp] = if !reduces(collective) {
                    &[ReduceOp::Sum]
                } else if n <= 4 {
                    &ReduceOp::ALL
                } else {
                    let k = (ci + di) % ReduceOp::ALL.len();
                    &ReduceOp::ALL[k..=k]
                };
                for &op in ops {
                    for (k, count) in counts(dtype).into_iter().enumerate() {
                        // The largest count only for f32/u8 and the sum, to keep the suite short.
                        if k == 5
                            && !(matches!(dtype, DataType::F32 | DataType::U8)
                                || op == ReduceOp::Sum)
                        {
                            continue;
                        }
                        for in_place in [false, true] {
                            if in_place && collective == Collective::AllToAll {
                                continue;
                            }
                            let case = Case {
                                collective,
                                dtype,
                                op,
                                count,
                                in_place,
                                seed: base
                                    ^ ((ci as u64) << 40)
                                    ^ ((dtype as u64) << 32)
                                    ^ ((op as u64) << 24)
                                    ^ count as u64,
                            };
                            if let Err(e) = run_case(&comm, &stream, &case) {
                                panic!("{e}");
                            }
                            cases += 1;
                        }
                    }
                }
            }
        }
        cases
    });
    eprintln!("{n} ranks: {} cases per rank, all checked", results[0]);
}

#[test]
fn matrix_1_rank() {
    matrix(1);
}

#[test]
fn matrix_2_ranks() {
    matrix(2);
}

#[test]
fn matrix_3_ranks() {
    matrix(3);
}

#[test]
fn matrix_4_ranks() {
    matrix(4);
}

#[test]
fn matrix_5_ranks() {
    matrix(5);
}

#[test]
fn matrix_8_ranks() {
    matrix(8);
}
