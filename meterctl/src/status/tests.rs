use super::*;
use awsmp_contract::keys::HourBucket;
use awsmp_contract::status::RawStatus;
use awsmp_pipeline::ports::AggregatedItem;
use chrono::TimeZone;

fn group() -> GroupKey {
    GroupKey::new(
        "arn:aws:license-manager::1:license:l-1",
        "210987654321",
        "api_calls",
        "2026-12-01T14".parse::<HourBucket>().unwrap(),
    )
}

fn time() -> TimeConfig {
    TimeConfig::new(1, 24, 365).unwrap()
}

fn at(h: u32, m: u32) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 12, 1, h, m, 0).unwrap()
}

fn moment<'a>(now: DateTime<Utc>, time: &'a TimeConfig) -> Moment<'a> {
    Moment {
        now,
        time,
        watermark: None,
        settle: Duration::seconds(120),
        deprovisioning: None,
    }
}

fn pending_rows() -> HourSources {
    let mut s = HourSources::new(group());
    s.rows.add(10, true, None, "", 0);
    s
}

#[test]
fn pending_rows_wait_for_the_lock_then_the_watermark_then_the_discoverer() {
    let t = time();
    let s = pending_rows();
    let st = status(&s, &moment(at(14, 30), &t));
    assert!(!st.terminal);
    assert!(
        st.next.starts_with("Waiting for the metering lock"),
        "{}",
        st.next
    );
    let mut m = moment(at(15, 5), &t);
    m.watermark = Some(at(15, 1));
    assert!(
        status(&s, &m)
            .next
            .starts_with("Waiting for the ingest watermark")
    );
    m.watermark = Some(at(15, 3));
    assert!(status(&s, &m).next.starts_with("Pending aggregation"));
}

#[test]
fn records_say_what_the_submitter_does_next() {
    let t = time();
    let mut s = HourSources::new(group());
    s.record = Some(AggregatedItem::new(group(), 10, None));
    assert!(
        status(&s, &moment(at(15, 5), &t))
            .next
            .starts_with("Pending submission")
    );
    let r = s.record.as_mut().unwrap();
    r.attempted_quantity = Some(10);
    assert!(
        status(&s, &moment(at(15, 5), &t))
            .next
            .starts_with("In flight")
    );
    let r = s.record.as_mut().unwrap();
    r.status = Some(AggregatedStatus::Error);
    r.status_reason = Some("InvalidUsageDimensionException".into());
    let st = status(&s, &moment(at(15, 5), &t));
    assert!(st.terminal);
    assert!(st.next.contains("meterctl redrive"), "{}", st.next);
    assert_eq!(st.record.unwrap().status, "Error");
}

#[test]
fn a_deprovisioned_license_says_not_subscribed_and_its_deadline() {
    let t = time();
    let mut s = HourSources::new(group());
    s.rows.add(10, false, Some(RawStatus::Aggregated), "", 0);
    let mut r = AggregatedItem::new(group(), 10, None);
    r.status = Some(AggregatedStatus::CustomerNotSubscribed);
    s.record = Some(r);
    let d = Deprovisioning {
        license_arn: group().license_arn,
        customer_aws_account_id: group().customer_aws_account_id,
        expiry: at(16, 0),
    };
    let mut m = moment(at(15, 5), &t);
    m.deprovisioning = Some(&d);
    let st = status(&s, &m);
    assert!(st.terminal);
    assert!(st.next.contains("CustomerNotSubscribed"), "{}", st.next);
    assert!(st.next.contains("deprovisioning"), "{}", st.next);
    assert!(st.next.contains("2026-12-01T16:00:00"), "{}", st.next);

    // AND once the window has closed, the answer says so rather than "stops at"
    let mut m = moment(at(16, 30), &t);
    m.deprovisioning = Some(&d);
    let st = status(&s, &m);
    assert!(
        st.next.contains("window closed at 2026-12-01T16:00:00"),
        "{}",
        st.next
    );
    assert!(!st.next.contains("stops accepting"), "{}", st.next);
}

#[test]
fn rejected_rows_point_to_redrive_inside_the_window_only() {
    let t = time();
    let mut s = HourSources::new(group());
    s.rows.add(
        7,
        false,
        Some(RawStatus::RejectedClientSide),
        "MalformedTimestamp",
        0,
    );
    assert!(
        status(&s, &moment(at(15, 5), &t))
            .next
            .contains("meterctl redrive")
    );
    let late = Utc.with_ymd_and_hms(2026, 12, 3, 0, 0, 0).unwrap();
    assert!(!status(&s, &moment(late, &t)).next.contains("redrive"));
}
