//! The JSON form of a history (`FORMAT.md`), read and written with serde.
//!
//! Reading streams: each transaction is interned into the [`History`] as soon as it is parsed,
//! so a file of 10^6 transactions never exists twice in memory, and key strings without
//! escapes are borrowed from the input rather than allocated. Unknown fields are errors (a
//! misspelt `writer` would otherwise silently read the initial version), and every error names
//! the file, line and column.

use crate::model::{History, TxnId};
use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde::ser::SerializeStruct;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::borrow::Cow;
use std::fmt;
use std::io::Write as _;
use std::path::{Path, PathBuf};

/// Why a history file could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum HistoryError {
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}:{line}:{column}: {message}", path.display())]
    Parse {
        path: PathBuf,
        line: usize,
        column: usize,
        message: String,
    },
}

impl History {
    /// Reads a history from a JSON file.
    pub fn load(path: impl AsRef<Path>) -> Result<History, HistoryError> {
        load_json(path.as_ref())
    }

    /// Parses a history from JSON text; errors name `<input>` as the file.
    pub fn from_json_str(text: &str) -> Result<History, HistoryError> {
        parse_json(text, Path::new("<input>"))
    }

    /// Writes the history as JSON (compact: one line, as large runs make large files).
    pub fn save(&self, path: impl AsRef<Path>) -> Result<(), HistoryError> {
        save_json(self, path.as_ref())
    }

    pub fn to_json_string(&self) -> String {
        serde_json::to_string(self).expect("a history always serializes")
    }
}

/// Reads a JSON file of this crate's formats; errors name the file.
pub(crate) fn load_json<T: de::DeserializeOwned>(path: &Path) -> Result<T, HistoryError> {
    let text = std::fs::read_to_string(path).map_err(|source| HistoryError::Io { path: path.into(), source })?;
    parse_json(&text, path)
}

/// Writes compact JSON (one line: large runs make large files).
pub(crate) fn save_json<T: Serialize>(value: &T, path: &Path) -> Result<(), HistoryError> {
    let io = |source| HistoryError::Io { path: path.into(), source };
    let file = std::fs::File::create(path).map_err(io)?;
    let mut out = std::io::BufWriter::new(file);
    serde_json::to_writer(&mut out, value).map_err(|e| io(e.into()))?;
    out.flush().map_err(io)
}

pub(crate) fn parse_json<T: de::DeserializeOwned>(text: &str, path: &Path) -> Result<T, HistoryError> {
    serde_json::from_str(text).map_err(|e| {
        // serde_json appends " at line L column C"; the position is reported in front instead.
        let message = e.to_string();
        let suffix = format!(" at line {} column {}", e.line(), e.column());
        let message = message.strip_suffix(&suffix).unwrap_or(&message).to_owned();
        HistoryError::Parse {
            path: path.into(),
            line: e.line(),
            column: e.column(),
            message,
        }
    })
}

fn is_true(b: &bool) -> bool {
    *b
}

fn default_true() -> bool {
    true
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct ReadJson<'a> {
    #[serde(borrow)]
    key: Cow<'a, str>,
    #[serde(default)]
    writer: Option<TxnId>,
    #[serde(default, borrow, skip_serializing_if = "Option::is_none")]
    value: Option<Cow<'a, str>>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct WriteJson<'a> {
    #[serde(borrow)]
    key: Cow<'a, str>,
    #[serde(default, borrow, skip_serializing_if = "Option::is_none")]
    value: Option<Cow<'a, str>>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct TxnJson<'a> {
    id: TxnId,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    session: Option<u64>,
    #[serde(default = "default_true", skip_serializing_if = "is_true")]
    committed: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    commit: Option<u64>,
    #[serde(default, borrow, skip_serializing_if = "Vec::is_empty")]
    reads: Vec<ReadJson<'a>>,
    #[serde(default, borrow, skip_serializing_if = "Vec::is_empty")]
    writes: Vec<WriteJson<'a>>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct InstallJson<'a> {
    #[serde(borrow)]
    replica: Cow<'a, str>,
    #[serde(borrow)]
    key: Cow<'a, str>,
    order: Vec<TxnId>,
    #[serde(default, borrow, skip_serializing_if = "Option::is_none")]
    value: Option<Cow<'a, str>>,
}

impl Serialize for History {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        struct Txns<'a>(&'a History);
        impl Serialize for Txns<'_> {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                let h = self.0;
                s.collect_seq((0..h.txns.len()).map(|i| {
                    let t = &h.txns[i];
                    TxnJson {
                        id: t.id,
                        session: t.session,
                        committed: t.committed,
                        commit: t.commit,
                        reads: h
                            .reads_of(i)
                            .iter()
                            .map(|r| ReadJson {
                                key: Cow::Borrowed(h.key_name(r.key)),
                                writer: r.writer,
                                value: h.values.get(r.value).map(Cow::Borrowed),
                            })
                            .collect(),
                        writes: h
                            .writes_of(i)
                            .iter()
                            .map(|w| WriteJson {
                                key: Cow::Borrowed(h.key_name(w.key)),
                                value: h.values.get(w.value).map(Cow::Borrowed),
                            })
                            .collect(),
                    }
                }))
            }
        }
        struct Installs<'a>(&'a History);
        impl Serialize for Installs<'_> {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                let h = self.0;
                s.collect_seq(h.installs.iter().map(|rec| InstallJson {
                    replica: Cow::Borrowed(h.replicas.name(rec.replica)),
                    key: Cow::Borrowed(h.key_name(rec.key)),
                    order: rec.order.clone(),
                    value: h.values.get(rec.value).map(Cow::Borrowed),
                }))
            }
        }
        let fields = if self.installs.is_empty() { 1 } else { 2 };
        let mut st = serializer.serialize_struct("History", fields)?;
        st.serialize_field("transactions", &Txns(self))?;
        if !self.installs.is_empty() {
            st.serialize_field("installs", &Installs(self))?;
        }
        st.end()
    }
}

const FIELDS: &[&str] = &["transactions", "installs"];

impl<'de> Deserialize<'de> for History {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<History, D::Error> {
        deserializer.deserialize_struct("History", FIELDS, HistoryVisitor)
    }
}

struct HistoryVisitor;

impl<'de> Visitor<'de> for HistoryVisitor {
    type Value = History;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a history: an object with `transactions` and optionally `installs`")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<History, A::Error> {
        let mut history = History::new();
        let (mut seen_txns, mut seen_installs) = (false, false);
        while let Some(field) = map.next_key::<Cow<'de, str>>()? {
            match field.as_ref() {
                "transactions" if !seen_txns => {
                    seen_txns = true;
                    map.next_value_seed(TxnsSeed(&mut history))?;
                }
                "installs" if !seen_installs => {
                    seen_installs = true;
                    map.next_value_seed(InstallsSeed(&mut history))?;
                }
                "transactions" | "installs" => return Err(de::Error::duplicate_field(FIELDS[0])),
                other => return Err(de::Error::unknown_field(other, FIELDS)),
            }
        }
        if !seen_txns {
            return Err(de::Error::missing_field("transactions"));
        }
        Ok(history)
    }
}

/// Parses the `transactions` array straight into the history.
struct TxnsSeed<'h>(&'h mut History);

impl<'de> DeserializeSeed<'de> for TxnsSeed<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for TxnsSeed<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an array of transactions")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while let Some(t) = seq.next_element::<TxnJson<'de>>()? {
            self.0.push_txn(
                t.id,
                t.session,
                t.committed,
                t.commit,
                t.reads
                    .iter()
                    .map(|r| (r.key.as_ref(), r.writer, r.value.as_deref())),
                t.writes
                    .iter()
                    .map(|w| (w.key.as_ref(), w.value.as_deref())),
            );
        }
        Ok(())
    }
}

/// Parses the `installs` array into the history's install reports.
struct InstallsSeed<'h>(&'h mut History);

impl<'de> DeserializeSeed<'de> for InstallsSeed<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for InstallsSeed<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an array of install reports")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while let Some(i) = seq.next_element::<InstallJson<'de>>()? {
            for &txn in &i.order {
                self.0.add_install(&i.replica, &i.key, txn);
            }
            if i.order.is_empty() {
                self.0.add_install_report(&crate::model::Install {
                    replica: i.replica.to_string(),
                    key: i.key.to_string(),
                    order: Vec::new(),
                    value: None,
                });
            }
            if let Some(value) = &i.value {
                self.0.set_final_value(&i.replica, &i.key, value);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Transaction;

    const EXAMPLE: &str = r#"{
  "transactions": [
    {"id": 1, "session": 0, "committed": true,
     "reads":  [{"key": "x", "writer": null}],
     "writes": [{"key": "x", "value": "1"}]},
    {"id": 2, "committed": false, "writes": [{"key": "x", "value": "2"}]},
    {"id": 3, "session": 0, "commit": 7,
     "reads":  [{"key": "x", "writer": 1, "value": "1"}],
     "writes": [{"key": "x", "value": "3"}, {"key": "y"}]}
  ],
  "installs": [
    {"replica": "r0", "key": "x", "order": [1, 3], "value": "3"},
    {"replica": "r1", "key": "x", "order": [1, 3]}
  ]
}"#;

    #[test]
    fn parses_the_documented_example() {
        let h = History::from_json_str(EXAMPLE).unwrap();
        let txns: Vec<Transaction> = h.transactions().collect();
        assert_eq!(txns.len(), 3);
        assert_eq!(
            txns[0],
            Transaction::committed(1)
                .in_session(0)
                .read("x", None)
                .write("x", "1")
        );
        assert!(!txns[1].committed);
        assert_eq!(
            txns[2],
            Transaction::committed(3)
                .in_session(0)
                .commit_seq(7)
                .read_value("x", Some(1), "1")
                .write("x", "3")
                .write_key("y")
        );
        let installs: Vec<_> = h.installs().collect();
        assert_eq!(installs[0].order, vec![1, 3]);
        assert_eq!(installs[0].value.as_deref(), Some("3"));
        assert_eq!(installs[1].replica, "r1");
    }

    #[test]
    fn the_format_document_example_is_valid_and_serializable() {
        let doc = include_str!("../FORMAT.md");
        let start = doc.find("```json\n").expect("FORMAT.md has a JSON example") + 8;
        let end = start + doc[start..].find("```").unwrap();
        let h = History::from_json_str(&doc[start..end]).unwrap();
        assert_eq!(h.len(), 4);
        for report in crate::check_all(&h) {
            assert!(report.ok(), "{report}");
        }
    }

    #[test]
    fn round_trips() {
        let h = History::from_json_str(EXAMPLE).unwrap();
        let text = h.to_json_string();
        let again = History::from_json_str(&text).unwrap();
        assert_eq!(h, again);
        assert_eq!(again.to_json_string(), text);
    }

    #[test]
    fn escaped_strings_are_unescaped() {
        let h = History::from_json_str(
            r#"{"transactions":[{"id":1,"writes":[{"key":"a\"b","value":"\u00e9"}]}]}"#,
        )
        .unwrap();
        let t = h.transactions().next().unwrap();
        assert_eq!(t.writes[0].key, "a\"b");
        assert_eq!(t.writes[0].value.as_deref(), Some("é"));
    }

    fn parse_error(text: &str) -> (usize, usize, String) {
        match History::from_json_str(text).unwrap_err() {
            HistoryError::Parse {
                line,
                column,
                message,
                path,
            } => {
                assert_eq!(path, Path::new("<input>"));
                (line, column, message)
            }
            other => panic!("expected a parse error, got {other}"),
        }
    }

    #[test]
    fn errors_say_what_is_wrong_and_where() {
        let (line, _, msg) = parse_error("{\"transactions\": [\n  {\"reads\": []}\n]}");
        assert_eq!(line, 2);
        assert!(msg.contains("missing field `id`"), "{msg}");

        let (line, col, msg) = parse_error(
            "{\"transactions\": [\n  {\"id\": 1, \"reads\": [{\"key\": \"x\", \"writr\": 3}]}\n]}",
        );
        assert_eq!(line, 2);
        assert!(col > 20, "column {col}");
        assert!(
            msg.contains("unknown field `writr`") && msg.contains("`writer`"),
            "{msg}"
        );

        let (_, _, msg) = parse_error(r#"{"transactions": [], "replicas": []}"#);
        assert!(
            msg.contains("unknown field `replicas`") && msg.contains("`installs`"),
            "{msg}"
        );

        let (_, _, msg) = parse_error(r#"{"installs": []}"#);
        assert!(msg.contains("missing field `transactions`"), "{msg}");

        let (_, _, msg) = parse_error(r#"{"transactions": [{"id": "T1"}]}"#);
        assert!(
            msg.contains("invalid type: string \"T1\", expected u64"),
            "{msg}"
        );

        let (line, _, msg) = parse_error("{\"transactions\": [\n{\"id\": 1}\n");
        assert_eq!(line, 3);
        assert!(msg.contains("EOF"), "{msg}");
    }

    #[test]
    fn load_names_the_file() {
        let dir = std::env::temp_dir().join(format!("ensemble-history-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let bad = dir.join("bad.json");
        std::fs::write(&bad, "{\"transactions\": [\n  {\"id\": 1,}\n]}").unwrap();
        let err = History::load(&bad).unwrap_err().to_string();
        assert!(err.starts_with(&format!("{}:2:", bad.display())), "{err}");
        let missing = dir.join("missing.json");
        let err = History::load(&missing).unwrap_err().to_string();
        assert!(err.starts_with(&missing.display().to_string()), "{err}");

        let good = dir.join("good.json");
        let h = History::from_json_str(EXAMPLE).unwrap();
        h.save(&good).unwrap();
        assert_eq!(History::load(&good).unwrap(), h);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
