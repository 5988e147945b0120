//! Every event of one Kinesis record, whatever wrote it: a plain v1 JSON record (boto3, say),
//! a plain v2 single, a KPL aggregate of v1 payloads, or a v2 aggregate (table + refs).

use bytes::Bytes;

use super::kpl::deaggregate;
use super::v2::{EntryAt, EntryV2, KIND_TABLE, RecordV2, V2, decode_v2, is_binary};
use crate::error::{DecodeError, V2Error};
use crate::event::Event;

/// One event user record of a Kinesis record, decoded or refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodedUser {
    /// Position inside the aggregate (the KCL's sub-sequence number; 0 for a plain record).
    pub sub: u32,
    /// The user record's partition key (`None` for a plain record: the record's own).
    pub partition_key: Option<String>,
    /// The user record's bytes.
    pub data: Bytes,
    /// The event, or why it does not decode.
    pub event: Result<Event, DecodeError>,
}

/// The event user records of `data` (a v2 aggregate's table is not one: it is skipped when it
/// decodes, and reported like an event when it does not). `Err` when the record as a whole
/// is unusable (a bad aggregate).
pub fn decode_events(data: &[u8]) -> Result<Vec<DecodedUser>, DecodeError> {
    let users = deaggregate(data)?;
    let table_data = users
        .first()
        .filter(|u| u.aggregated && u.data.starts_with(&[V2, KIND_TABLE]))
        .map(|u| u.data.clone());
    let table: Option<Result<Vec<EntryV2<'_>>, V2Error>> =
        table_data.as_ref().map(|d| match decode_v2(d) {
            Ok(RecordV2::Table(t)) => Ok(t),
            Ok(RecordV2::Event(_)) => unreachable!("the kind byte says table"),
            Err(e) => Err(e),
        });
    let mut out = Vec::with_capacity(users.len());
    for (i, u) in users.iter().enumerate() {
        let sub = u32::try_from(u.sub_sequence_number).unwrap_or(u32::MAX);
        let event = if i == 0 && table.is_some() {
            match &table {
                Some(Err(e)) => Err(DecodeError::V2(e.clone())),
                _ => continue,
            }
        } else if is_binary(&u.data) {
            decode_binary(&u.data, u.partition_key.as_deref(), table.as_ref())
        } else {
            super::decode_event(&u.data)
        };
        out.push(DecodedUser {
            sub,
            partition_key: u.partition_key.clone(),
            data: u.data.clone(),
            event,
        });
    }
    Ok(out)
}

fn decode_binary(
    data: &[u8],
    pk: Option<&str>,
    table: Option<&Result<Vec<EntryV2<'_>>, V2Error>>,
) -> Result<Event, DecodeError> {
    match decode_v2(data)? {
        RecordV2::Table(_) => Err(V2Error::Malformed(
            "a table that is not the first user record of an aggregate".into(),
        )
        .into()),
        RecordV2::Event(e) => match e.entry {
            EntryAt::Inline(entry) => e.to_event(&entry, None),
            EntryAt::Index(ix) => {
                let entries = match table {
                    None => {
                        return Err(V2Error::UnknownGroup(format!(
                            "entry {ix} of an aggregate without a table"
                        ))
                        .into());
                    }
                    Some(Err(_)) => {
                        return Err(V2Error::UnknownGroup(format!(
                            "entry {ix} of a table that does not decode"
                        ))
                        .into());
                    }
                    Some(Ok(t)) => t,
                };
                let entry = usize::try_from(ix)
                    .ok()
                    .and_then(|i| entries.get(i))
                    .ok_or_else(|| {
                        V2Error::UnknownGroup(format!(
                            "entry {ix} outside a table of {}",
                            entries.len()
                        ))
                    })?;
                e.to_event(entry, pk)
            }
        },
    }
}
