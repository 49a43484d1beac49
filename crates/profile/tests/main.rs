//! Integration tests of the BBV reader: hostile input never panics, and compressed input reads
//! the same as plain input.

use std::io::Write;

use bbv_profile::{BbvReader, BbvWriter, ProfileError, Token};
use proptest::prelude::*;

fn read_all(bytes: &[u8]) -> Result<Vec<Vec<Token>>, ProfileError> {
    let mut r = BbvReader::new(bytes, "fuzz.bb");
    let mut out = Vec::new();
    let mut v = Vec::new();
    while r.next_vector(&mut v)? {
        out.push(v.clone());
    }
    Ok(out)
}

fn read_file(bytes: &[u8]) -> Result<Vec<Vec<Token>>, ProfileError> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("in.bb");
    std::fs::write(&path, bytes).unwrap();
    let mut r = BbvReader::open(&path)?;
    let mut out = Vec::new();
    let mut v = Vec::new();
    while r.next_vector(&mut v)? {
        out.push(v.clone());
    }
    Ok(out)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
        let _ = read_all(&bytes);
    }

    #[test]
    fn bbv_like_bytes_never_panic(text in "(T?[:0-9 eE.+\\-\tx\n]{0,60}\n?){0,8}") {
        let _ = read_all(text.as_bytes());
    }

    #[test]
    fn random_compressed_headers_never_panic(tail in proptest::collection::vec(any::<u8>(), 0..300), zstd in any::<bool>()) {
        let mut bytes = if zstd { vec![0x28, 0xb5, 0x2f, 0xfd] } else { vec![0x1f, 0x8b] };
        bytes.extend(tail);
        // Must return (an error, almost always), never panic or hang.
        let _ = read_file(&bytes);
    }

    #[test]
    fn written_vectors_read_back(vectors in proptest::collection::vec(
        proptest::collection::vec((1u32..5000, 1u64..1_000_000_000), 1..20), 1..20)) {
        let mut w = BbvWriter::new(Vec::new());
        for v in &vectors {
            w.write_vector(v).unwrap();
        }
        let bytes = w.finish().unwrap();
        let back = read_all(&bytes).unwrap();
        prop_assert_eq!(back.len(), vectors.len());
        for (b, v) in back.iter().zip(&vectors) {
            let want: Vec<Token> = v.iter().map(|&(id, c)| Token { id, value: c as f64 }).collect();
            prop_assert_eq!(b, &want);
        }
    }
}

#[test]
fn gzip_and_zstd_read_like_plain_including_concatenated_gzip() {
    let text = b"T:1:5   :2:7   \n# c\nT:3:1\n";
    let mut gz = Vec::new();
    for part in [&text[..16], &text[16..]] {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        e.write_all(part).unwrap();
        gz.extend(e.finish().unwrap());
    }
    let zst = zstd::encode_all(&text[..], 1).unwrap();
    let plain = read_file(text).unwrap();
    assert_eq!(plain.len(), 2);
    assert_eq!(read_file(&gz).unwrap(), plain);
    assert_eq!(read_file(&zst).unwrap(), plain);
}

#[test]
fn truncated_gzip_is_an_error_naming_the_file() {
    let text = "T:1:5   :2:7   \n".repeat(5000);
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(text.as_bytes()).unwrap();
    let gz = e.finish().unwrap();
    let err = read_file(&gz[..gz.len() - 20]).unwrap_err().to_string();
    assert!(err.contains("in.bb:") && err.contains("gzip"), "{err}");
}

#[test]
fn long_lines_have_no_limit() {
    let mut line = String::from("T");
    for id in 1..=300_000u32 {
        line.push_str(&format!(":{id}:1 "));
    }
    line.push('\n');
    assert!(line.len() > 2 << 20);
    let v = read_all(line.as_bytes()).unwrap();
    assert_eq!(v[0].len(), 300_000);
}
