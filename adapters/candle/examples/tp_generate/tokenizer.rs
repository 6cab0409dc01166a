//! The model's own tokenizer, built from its GGUF metadata (no download):
//! GPT-2's byte-level BPE (`tokenizer.ggml.model = gpt2`) with the
//! `smollm` pre-tokenizer (every digit a piece of its own, then GPT-2's
//! split into words, numbers, punctuation runs and spaces).

use std::collections::HashMap;

use candle_core::{Error, Result};
use streamcomm_candle::gguf::GgufFile;

/// Token type of a control token (`<|im_start|>`, ...) in
/// `tokenizer.ggml.token_type`: matched whole in the text, never merged.
const CONTROL: i32 = 3;

/// Byte-level BPE over the model's vocabulary and merges.
pub(crate) struct Tokenizer {
    tokens: Vec<String>,
    ids: HashMap<String, u32>,
    ranks: HashMap<(String, String), usize>,
    controls: Vec<(String, u32)>,
    byte_char: [char; 256],
    char_byte: HashMap<char, u8>,
    /// `tokenizer.ggml.eos_token_id`.
    pub eos: u32,
    /// `tokenizer.ggml.bos_token_id` where `tokenizer.ggml.add_bos_token` says
    /// to put it first.
    pub bos: Option<u32>,
}

impl Tokenizer {
    /// The tokenizer described by `file`'s metadata.
    pub(crate) fn from_gguf(file: &GgufFile) -> Result<Tokenizer> {
        let model = file.metadata("tokenizer.ggml.model")?.to_string()?;
        if model != "gpt2" {
            return Err(Error::Msg(format!(
                "tokenizer.ggml.model is {model}; this example reads gpt2 (byte-level BPE) tokenizers"
            )));
        }
        let strings = |key: &str| -> Result<Vec<String>> {
            file.metadata(key)?
                .to_vec()?
                .iter()
                .map(|v| v.to_string().cloned())
                .collect()
        };
        let tokens = strings("tokenizer.ggml.tokens")?;
        let ids = tokens
            .iter()
            .enumerate()
            .map(|(i, t)| (t.clone(), i as u32))
            .collect();
        let ranks = strings("tokenizer.ggml.merges")?
            .into_iter()
            .enumerate()
            .filter_map(|(rank, m)| {
                let (a, b) = m.split_once(' ')?;
                Some(((a.to_string(), b.to_string()), rank))
            })
            .collect();
        let types: Vec<i32> = match file.metadata("tokenizer.ggml.token_type") {
            Ok(v) => v
                .to_vec()?
                .iter()
                .map(|t| t.to_i32())
                .collect::<Result<_>>()?,
            Err(_) => Vec::new(),
        };
        let controls = types
            .iter()
            .enumerate()
            .filter(|&(_, &t)| t == CONTROL)
            .map(|(i, _)| (tokens[i].clone(), i as u32))
            .collect();
        let id = |key: &str| -> Result<u32> { file.metadata(key)?.to_u32() };
        let add_bos = file
            .metadata("tokenizer.ggml.add_bos_token")
            .and_then(|v| v.to_bool())
            .unwrap_or(false);
        let byte_char = byte_chars();
        let char_byte = (0..=255u8).map(|b| (byte_char[b as usize], b)).collect();
        Ok(Tokenizer {
            tokens,
            ids,
            ranks,
            controls,
            byte_char,
            char_byte,
            eos: id("tokenizer.ggml.eos_token_id")?,
            bos: if add_bos {
                Some(id("tokenizer.ggml.bos_token_id")?)
            } else {
                None
            },
        })
    }

    /// The ids of `text`.
    pub(crate) fn encode(&self, text: &str) -> Result<Vec<u32>> {
        let mut out: Vec<u32> = self.bos.into_iter().collect();
        let mut rest = text;
        while !rest.is_empty() {
            // The earliest control token in the rest, if any.
            let next = self
                .controls
                .iter()
                .filter_map(|(s, id)| rest.find(s.as_str()).map(|at| (at, s.len(), *id)))
                .min_by_key(|&(at, len, _)| (at, usize::MAX - len));
            let (plain, control) = match next {
                Some((at, len, id)) => (&rest[..at], Some((id, at + len))),
                None => (rest, None),
            };
            for piece in pieces(plain) {
                self.bpe(piece, &mut out)?;
            }
            match control {
                Some((id, end)) => {
                    out.push(id);
                    rest = &rest[end..];
                }
                None => break,
            }
        }
        Ok(out)
    }

    /// The text of `ids` (bytes that are not UTF-8 replaced).
    pub(crate) fn decode(&self, ids: &[u32]) -> String {
        let mut bytes = Vec::new();
        for &id in ids {
            let Some(token) = self.tokens.get(id as usize) else {
                continue;
            };
            if self.controls.iter().any(|&(_, c)| c == id) {
                bytes.extend_from_slice(token.as_bytes());
                continue;
            }
            bytes.extend(token.chars().filter_map(|c| self.char_byte.get(&c)));
        }
        String::from_utf8_lossy(&bytes).into_owned()
    }

    /// Appends the ids of one pre-tokenized piece: its bytes as GPT-2's
    /// printable characters, merged pair by pair, lowest merge rank first.
    fn bpe(&self, piece: &str, out: &mut Vec<u32>) -> Result<()> {
        let mut parts: Vec<String> = piece
            .bytes()
            .map(|b| self.byte_char[b as usize].to_string())
            .collect();
        loop {
            let best = parts
                .windows(2)
                .enumerate()
                .filter_map(|(i, w)| {
                    self.ranks
                        .get(&(w[0].clone(), w[1].clone()))
                        .map(|&r| (r, i))
                })
                .min();
            let Some((_, i)) = best else { break };
            let right = parts.remove(i + 1);
            parts[i].push_str(&right);
        }
        for p in parts {
            let id = self.ids.get(&p).ok_or_else(|| {
                Error::Msg(format!(
                    "the vocabulary has no token {p:?} (from {piece:?})"
                ))
            })?;
            out.push(*id);
        }
        Ok(())
    }
}

/// GPT-2's map from bytes to printable characters: printable Latin-1 bytes
/// stand for themselves, the rest for the characters from U+0100 on.
fn byte_chars() -> [char; 256] {
    let printable = |b: u8| matches!(b, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF);
    let mut map = ['\0'; 256];
    let mut next = 256u32;
    for b in 0..=255u8 {
        map[b as usize] = if printable(b) {
            char::from(b)
        } else {
            let c = char::from_u32(next).unwrap_or('\u{FFFD}');
            next += 1;
            c
        };
    }
    map
}

/// The `smollm` pre-tokenizer: every numeric character alone, and the text
/// between them split as GPT-2's pattern does
/// (`'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`).
pub(crate) fn pieces(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut segment = 0;
    for (i, c) in text.char_indices() {
        if c.is_numeric() {
            gpt2_pieces(&text[segment..i], &mut out);
            out.push(&text[i..i + c.len_utf8()]);
            segment = i + c.len_utf8();
        }
    }
    gpt2_pieces(&text[segment..], &mut out);
    out
}

/// GPT-2's split of `text` (which holds no numeric character).
fn gpt2_pieces<'a>(text: &'a str, out: &mut Vec<&'a str>) {
    let chars: Vec<(usize, char)> = text.char_indices().collect();
    let at = |k: usize| chars.get(k).map(|&(_, c)| c);
    let offset = |k: usize| chars.get(k).map_or(text.len(), |&(o, _)| o);
    let run = |mut k: usize, f: &dyn Fn(char) -> bool| {
        while at(k).is_some_and(f) {
            k += 1;
        }
        k
    };
    let letter = |c: char| c.is_alphabetic();
    let other = |c: char| !c.is_whitespace() && !c.is_alphabetic() && !c.is_numeric();
    let mut k = 0;
    while k < chars.len() {
        let rest = &text[offset(k)..];
        let contraction = ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d"]
            .into_iter()
            .find(|s| rest.starts_with(s));
        let end = if let Some(s) = contraction {
            k + s.len()
        } else {
            let body = k + usize::from(at(k) == Some(' '));
            if at(body).is_some_and(letter) {
                run(body, &letter)
            } else if at(body).is_some_and(other) {
                run(body, &other)
            } else {
                // Whitespace: all of it at the end of the text, else all
                // but the last character (which goes with the next word),
                // and a single character alone.
                let spaces = run(k, &|c: char| c.is_whitespace());
                if spaces == chars.len() || spaces - k == 1 {
                    spaces
                } else {
                    spaces - 1
                }
            }
        };
        out.push(&text[offset(k)..offset(end)]);
        k = end;
    }
}
