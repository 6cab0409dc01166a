//! The header's layout comments and constants agree with the Rust twins.

use super::*;

/// `(field, offset)` pairs and the size of `struct name` from the header's comments.
fn header_layout(name: &str) -> (Vec<(String, usize)>, usize) {
    let start = DEVICE_HEADER
        .find(&format!("struct {name} {{"))
        .unwrap_or_else(|| panic!("struct {name} not in the header"));
    let mut fields = Vec::new();
    for line in DEVICE_HEADER[start..].lines().skip(1) {
        let (code, comment) = line.split_once("//").unwrap_or((line, ""));
        let number = |key: &str| -> Option<usize> {
            let rest = comment.trim().strip_prefix(key)?.trim();
            rest.split(|c: char| !c.is_ascii_digit())
                .next()?
                .parse()
                .ok()
        };
        if code.trim().is_empty() {
            continue; // a comment line
        }
        if code.trim_start().starts_with('}') {
            return (fields, number("size").expect("size comment"));
        }
        let field = code.trim().trim_end_matches(';');
        let field = field.rsplit([' ', '*']).next().unwrap();
        let field = field.split('[').next().unwrap().to_string();
        fields.push((field, number("offset").expect("offset comment")));
    }
    panic!("struct {name} not closed")
}

fn define(name: &str) -> usize {
    let line = DEVICE_HEADER
        .lines()
        .find(|l| l.starts_with(&format!("#define {name} ")))
        .unwrap_or_else(|| panic!("{name} not defined"));
    line.split_whitespace().nth(2).unwrap().parse().unwrap()
}

#[test]
fn reduce_args_match_the_header() {
    let (fields, size) = header_layout("sc_reduce_args");
    assert_eq!(size, size_of::<ReduceArgs>());
    let expect = [
        ("srcs", offset_of!(ReduceArgs, srcs)),
        ("dsts", offset_of!(ReduceArgs, dsts)),
        ("count", offset_of!(ReduceArgs, count)),
        ("nsrcs", offset_of!(ReduceArgs, nsrcs)),
        ("ndsts", offset_of!(ReduceArgs, ndsts)),
        ("avg_divisor", offset_of!(ReduceArgs, avg_divisor)),
        ("reserved", offset_of!(ReduceArgs, reserved)),
        ("abort", offset_of!(ReduceArgs, abort)),
    ];
    let expect: Vec<(String, usize)> = expect.iter().map(|(n, o)| (n.to_string(), *o)).collect();
    assert_eq!(fields, expect);
}

#[test]
fn spin_args_match_the_header() {
    let (fields, size) = header_layout("sc_spin_wait_args");
    assert_eq!(size, size_of::<SpinWaitArgs>());
    let names: Vec<&str> = fields.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        ["addr", "status", "timeout_ns", "value", "cond", "wide"]
    );
    let offsets: Vec<usize> = fields.iter().map(|f| f.1).collect();
    assert_eq!(
        offsets,
        [
            offset_of!(SpinWaitArgs, addr),
            offset_of!(SpinWaitArgs, status),
            offset_of!(SpinWaitArgs, timeout_ns),
            offset_of!(SpinWaitArgs, value),
            offset_of!(SpinWaitArgs, cond),
            offset_of!(SpinWaitArgs, wide)
        ]
    );
    let (fields, size) = header_layout("sc_spin_write_args");
    assert_eq!(size, size_of::<SpinWriteArgs>());
    assert_eq!(
        fields[1],
        ("value".to_string(), offset_of!(SpinWriteArgs, value))
    );
}

#[test]
fn constants_match_the_header() {
    assert_eq!(define("SC_MAX_SRCS"), MAX_SRCS);
    assert_eq!(define("SC_MAX_DSTS"), MAX_DSTS);
    assert_eq!(define("SC_DOORBELL_STRIDE"), DOORBELL_STRIDE);
}

#[test]
fn every_dtype_and_op_has_a_kernel_in_the_source() {
    let names = all_reduce_kernel_names();
    assert_eq!(names.len(), 50);
    for d in DataType::ALL {
        let line = format!("SC_KERNELS({}, ", d.name());
        assert!(REDUCE_SOURCE.contains(&line), "no kernels for {d}");
    }
    for op in ReduceOp::ALL {
        assert!(
            REDUCE_SOURCE.contains(&format!("SC_KERNEL(NAME##_{}, ", op.name())),
            "{op}"
        );
    }
    assert_eq!(
        reduce_kernel_name(DataType::Bf16, ReduceOp::Avg),
        "sc_reduce_copy_bf16_avg"
    );
}
