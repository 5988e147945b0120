//! Each emulator of the local stack, exercised once through the Rust SDK clients awsmp uses,
//! and the provisioned resources checked against `infra/resources.json`.
//!
//! These need a running stack: `scripts/test` starts one and exports its env file.

use anyhow::Result;
use aws_sdk_dynamodb::types::{AttributeValue as Av, ReturnValue};
use awsmp_local_stack::local::LocalEnv;
use awsmp_local_stack::local::resources::{GsiDef, Resources, TableDef, ensure_table};
use std::time::Duration;

const NEEDS_STACK: &str = "needs the local stack (awsmp-local up); run by scripts/test";

fn env() -> LocalEnv {
    LocalEnv::from_process()
}

fn unique(prefix: &str) -> String {
    format!("{prefix}-{}", uuid::Uuid::new_v4().simple())
}

fn s(v: &str) -> Av {
    Av::S(v.into())
}

#[tokio::test]
#[ignore = "needs the local stack (awsmp-local up); run by scripts/test"]
async fn provisioned_tables_match_the_definitions() -> Result<()> {
    let _one = crate::common::STACK.lock().await;
    let _ = NEEDS_STACK;
    let env = env();
    let ddb = env.dynamodb().await?;
    for t in Resources::load()?.tables {
        let name = env.get(&t.env)?;
        assert_eq!(name, t.name);
        let desc = ddb
            .describe_table()
            .table_name(name)
            .send()
            .await?
            .table
            .unwrap();
        let keys: Vec<(String, String)> = desc
            .key_schema()
            .iter()
            .map(|k| {
                (
                    k.attribute_name().to_owned(),
                    k.key_type().as_str().to_owned(),
                )
            })
            .collect();
        let mut want = vec![(t.hash_key.name.clone(), "HASH".to_owned())];
        want.extend(
            t.range_key
                .iter()
                .map(|r| (r.name.clone(), "RANGE".to_owned())),
        );
        assert_eq!(keys, want, "{}", t.name);
        let mut gsis: Vec<(String, String, Vec<String>)> = desc
            .global_secondary_indexes()
            .iter()
            .map(|g| {
                let p = g.projection().unwrap();
                let mut nka = p.non_key_attributes().to_vec();
                nka.sort();
                (
                    g.index_name().unwrap().to_owned(),
                    p.projection_type().unwrap().as_str().to_owned(),
                    nka,
                )
            })
            .collect();
        gsis.sort();
        let mut want: Vec<(String, String, Vec<String>)> = t
            .gsis
            .iter()
            .map(|g| {
                let mut nka = g.projection.non_key_attributes.clone();
                nka.sort();
                (g.name.clone(), g.projection.kind.clone(), nka)
            })
            .collect();
        want.sort();
        assert_eq!(gsis, want, "{}", t.name);
    }
    Ok(())
}

#[tokio::test]
#[ignore = "needs the local stack (awsmp-local up); run by scripts/test"]
async fn provisioned_queues_have_dead_letter_queues() -> Result<()> {
    let _one = crate::common::STACK.lock().await;
    use aws_sdk_sqs::types::QueueAttributeName as Q;
    let env = env();
    let sqs = env.sqs().await?;
    for q in Resources::load()?.queues {
        let url = env.get(&q.env)?;
        let attrs = sqs
            .get_queue_attributes()
            .queue_url(url)
            .attribute_names(Q::All)
            .send()
            .await?;
        let attrs = attrs.attributes.unwrap_or_default();
        assert_eq!(
            attrs.get(&Q::VisibilityTimeout).map(String::as_str),
            Some(q.visibility_timeout_seconds.to_string().as_str())
        );
        if let Some(dlq) = &q.dlq {
            let policy: serde_json::Value =
                serde_json::from_str(attrs.get(&Q::RedrivePolicy).expect("redrive policy"))?;
            assert!(
                policy["deadLetterTargetArn"]
                    .as_str()
                    .unwrap()
                    .ends_with(&dlq.name)
            );
            assert_eq!(
                policy["maxReceiveCount"].to_string().trim_matches('"'),
                dlq.max_receive_count.to_string()
            );
            env.get(&dlq.env)?;
        }
    }
    Ok(())
}

fn scratch_table(name: &str) -> TableDef {
    let mut t = Resources::load()
        .unwrap()
        .table("UsageTable")
        .unwrap()
        .clone();
    t.name = name.into();
    t
}

#[tokio::test]
#[ignore = "needs the local stack (awsmp-local up); run by scripts/test"]
async fn dynamodb_conditional_put_update_query_and_sparse_gsi_paging() -> Result<()> {
    let _one = crate::common::STACK.lock().await;
    let env = env();
    let ddb = env.dynamodb().await?;
    let table = unique("t-ddb");
    let def = scratch_table(&table);
    assert!(ensure_table(&ddb, &def).await?, "created");
    assert!(!ensure_table(&ddb, &def).await?, "second create is a no-op");
    let gsi: &GsiDef = &def.gsis[0];

    let lic = "arn:aws:license-manager::123456789012:license:l-0123456789abcdef0123456789abcdef";
    // 30 rows in one hour, every third one pending (the sparse index holds only those).
    put_rows(&ddb, &table, lic).await?;

    // Conditional put on an existing key fails with ConditionalCheckFailed.
    let err = ddb
        .put_item()
        .table_name(&table)
        .item("licenseArn", s(lic))
        .item(
            "customerAWSAccountId_dimension_timestamp",
            s("111122223333#calls#2026-11-30T10:00:00"),
        )
        .condition_expression("attribute_not_exists(licenseArn)")
        .send()
        .await
        .unwrap_err();
    assert!(
        err.as_service_error()
            .unwrap()
            .is_conditional_check_failed_exception()
    );

    // UpdateItem with ADD, SET (if_not_exists) and REMOVE in one expression.
    let out = ddb
        .update_item()
        .table_name(&table)
        .key("licenseArn", s(lic))
        .key("customerAWSAccountId_dimension_timestamp", s("111122223333#calls#2026-11-30T10:00:03"))
        .update_expression("ADD quantity :q SET createdAt = if_not_exists(createdAt, :now), updatedAt = :now REMOVE meteringPending")
        .expression_attribute_values(":q", Av::N("100".into()))
        .expression_attribute_values(":now", s("2026-11-30T12:00:00Z"))
        .return_values(ReturnValue::AllNew)
        .send()
        .await?;
    let item = out.attributes.unwrap();
    assert_eq!(item["quantity"], Av::N("103".into()));
    assert_eq!(item["createdAt"], s("2026-11-30T12:00:00Z"));
    assert!(!item.contains_key("meteringPending"));

    // begins_with on the sort key reads exactly one group-hour prefix.
    let q = ddb
        .query()
        .table_name(&table)
        .key_condition_expression(
            "licenseArn = :l AND begins_with(customerAWSAccountId_dimension_timestamp, :p)",
        )
        .expression_attribute_values(":l", s(lic))
        .expression_attribute_values(":p", s("111122223333#calls#2026-11-30T10:00:1"))
        .send()
        .await?;
    assert_eq!(q.count, 10);

    // The sparse GSI, read 3 items a page, yields only the 9 still-pending rows.
    let (pages, mut seen) = pending_pages(&ddb, &table, &gsi.name).await?;
    assert!(pages >= 3, "paged: {pages}");
    seen.sort();
    seen.dedup();
    assert_eq!(seen.len(), 9, "{seen:?}"); // 10 pending (0,3,..27) minus the one REMOVEd above
    ddb.delete_table().table_name(&table).send().await?;
    Ok(())
}

/// 30 rows of one group-hour, one a second; every third one pending.
async fn put_rows(ddb: &aws_sdk_dynamodb::Client, table: &str, lic: &str) -> Result<()> {
    for sec in 0..30 {
        let mut put = ddb
            .put_item()
            .table_name(table)
            .item("licenseArn", s(lic))
            .item(
                "customerAWSAccountId_dimension_timestamp",
                s(&format!("111122223333#calls#2026-11-30T10:00:{sec:02}")),
            )
            .item("customerAWSAccountId", s("111122223333"))
            .item("dimension", s("calls"))
            .item("quantity", Av::N(sec.to_string()));
        if sec % 3 == 0 {
            put = put.item("meteringPending", s("2026-11-30T10"));
        }
        put.send().await?;
    }
    Ok(())
}

/// The pending rows of hour 2026-11-30T10 through the sparse index, 3 items a page: pages read
/// and the sort keys seen. Every item carries `dimension` (the INCLUDE projection).
async fn pending_pages(
    ddb: &aws_sdk_dynamodb::Client,
    table: &str,
    index: &str,
) -> Result<(usize, Vec<String>)> {
    let mut seen = Vec::new();
    let mut start = None;
    let mut pages = 0;
    loop {
        let page = ddb
            .query()
            .table_name(table)
            .index_name(index)
            .key_condition_expression("meteringPending = :h")
            .expression_attribute_values(":h", s("2026-11-30T10"))
            .limit(3)
            .set_exclusive_start_key(start)
            .send()
            .await?;
        pages += 1;
        for it in page.items() {
            assert_eq!(
                it["dimension"],
                s("calls"),
                "INCLUDE projection carries dimension"
            );
            seen.push(
                it["customerAWSAccountId_dimension_timestamp"]
                    .as_s()
                    .unwrap()
                    .clone(),
            );
        }
        start = page.last_evaluated_key;
        if start.is_none() {
            break;
        }
    }
    Ok((pages, seen))
}

#[tokio::test]
#[ignore = "needs the local stack (awsmp-local up); run by scripts/test"]
async fn kinesis_put_and_read_back() -> Result<()> {
    let _one = crate::common::STACK.lock().await;
    use aws_sdk_kinesis::primitives::Blob;
    use aws_sdk_kinesis::types::{PutRecordsRequestEntry, ShardIteratorType};
    let env = env();
    let kinesis = env.kinesis().await?;
    let stream = awsmp_local_stack::local::resources::StreamDef {
        logical_id: "Scratch".into(),
        stack: "test".into(),
        name: unique("s"),
        env: String::new(),
        shards: 1,
    };
    awsmp_local_stack::local::resources::ensure_stream(&kinesis, &stream).await?;
    let entries: Vec<_> = (0..20)
        .map(|i| {
            PutRecordsRequestEntry::builder()
                .data(Blob::new(format!("record-{i}")))
                .partition_key(format!("pk-{}", i % 4))
                .build()
                .unwrap()
        })
        .collect();
    let out = kinesis
        .put_records()
        .stream_name(&stream.name)
        .set_records(Some(entries))
        .send()
        .await?;
    assert_eq!(out.failed_record_count, Some(0));
    let shard = kinesis
        .list_shards()
        .stream_name(&stream.name)
        .send()
        .await?
        .shards
        .unwrap()[0]
        .shard_id
        .clone();
    let mut it = kinesis
        .get_shard_iterator()
        .stream_name(&stream.name)
        .shard_id(shard)
        .shard_iterator_type(ShardIteratorType::TrimHorizon)
        .send()
        .await?
        .shard_iterator;
    let mut got = Vec::new();
    for _ in 0..10 {
        let Some(i) = it else { break };
        let page = kinesis.get_records().shard_iterator(i).send().await?;
        for r in page.records() {
            got.push(String::from_utf8(r.data().as_ref().to_vec())?);
            assert!(r.approximate_arrival_timestamp().is_some());
        }
        if got.len() == 20 {
            break;
        }
        it = page.next_shard_iterator;
    }
    assert_eq!(
        got,
        (0..20).map(|i| format!("record-{i}")).collect::<Vec<_>>()
    );
    kinesis
        .delete_stream()
        .stream_name(&stream.name)
        .send()
        .await?;
    Ok(())
}

#[tokio::test]
#[ignore = "needs the local stack (awsmp-local up); run by scripts/test"]
async fn sqs_send_receive_visibility_and_redrive_to_dlq() -> Result<()> {
    let _one = crate::common::STACK.lock().await;
    let env = env();
    let sqs = env.sqs().await?;
    let def = awsmp_local_stack::local::resources::QueueDef {
        logical_id: "Scratch".into(),
        stack: "test".into(),
        name: unique("q"),
        env: "Q".into(),
        visibility_timeout_seconds: 30,
        dlq: Some(awsmp_local_stack::local::resources::DlqDef {
            name: unique("dlq"),
            env: "D".into(),
            max_receive_count: 2,
        }),
    };
    let urls = awsmp_local_stack::local::resources::ensure_queue(&sqs, &def).await?;
    let (queue, dlq) = (&urls[0].1, &urls[1].1);

    sqs.send_message()
        .queue_url(queue)
        .message_body("hello")
        .send()
        .await?;
    // Receive with a 1 s visibility timeout: hidden immediately after, visible again later.
    let first = sqs
        .receive_message()
        .queue_url(queue)
        .visibility_timeout(1)
        .send()
        .await?;
    assert_eq!(first.messages().len(), 1);
    assert_eq!(first.messages()[0].body(), Some("hello"));
    let hidden = sqs.receive_message().queue_url(queue).send().await?;
    assert!(
        hidden.messages().is_empty(),
        "in flight messages are invisible"
    );
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let second = sqs
        .receive_message()
        .queue_url(queue)
        .visibility_timeout(1)
        .send()
        .await?;
    assert_eq!(
        second.messages().len(),
        1,
        "redelivered after the visibility timeout"
    );
    tokio::time::sleep(Duration::from_millis(1500)).await;
    // Received twice = maxReceiveCount: the next receive moves it to the DLQ.
    let third = sqs.receive_message().queue_url(queue).send().await?;
    assert!(third.messages().is_empty());
    let dead = sqs.receive_message().queue_url(dlq).send().await?;
    assert_eq!(dead.messages().len(), 1);
    assert_eq!(dead.messages()[0].body(), Some("hello"));
    sqs.delete_queue().queue_url(queue).send().await?;
    sqs.delete_queue().queue_url(dlq).send().await?;
    Ok(())
}
