//! The window-close race class: expiry and a submitter run side by side across the hour in
//! which a record leaves the billable window (docs/guarantees.md, "Submitter and expiry"), or,
//! in half of the class, across 06:00 UTC on the 1st, when the month's grace for the previous
//! month's usage ends (`Setup::race_grace`).
//!
//! In AWS one schedule starts both every 5 minutes; a submitter run chooses its records when
//! it starts and may last 240 s, so a run that starts at xx:59:50 may still mark and send a
//! record whose hour expiry, started at xx+1:00:05, finds out of the window. Schedules of this
//! class (a 3 h window) carry a backlog: events stamped in the hour that leaves the window at
//! the first hour boundary of the schedule (declared late arrivals: the fence is past them).
//! While the clock is within [`RACE_LEAD`] of an hour boundary, an active step may run the
//! race: the clock moves to seconds before the boundary, the submitter starts, and expiry
//! starts a few of the run's calls later, the clock moving past the boundary as it starts —
//! time passing between two calls of the submitter's run. Every port call of both yields to
//! the other a seeded number of times (`testkit/src/faults.rs`, [`Call::yields`]), so their
//! calls interleave, replayably: a table call 0–2 times, a `BatchMeterUsage` call 0–499 times
//! (expiry's whole lookback scan takes about 100 turns), so expiry may read, decide and write
//! while a record's call is in flight. The racing expiry is fault-free and does not move the clock
//! itself (its scan of 744 buckets takes about a second in AWS); the backlog is committed,
//! fault-free, before the first race (`World::race_prepare`).
//!
//! [`Call::yields`]: crate::faults::Call::yields

use crate::faults::{RACE_FRAME, hash, in_frame};
use crate::ports::yield_times;
use crate::steps::DIMENSIONS;
use crate::world::{World, lock};
use awsmp_contract::clock::Clock;
use awsmp_contract::keys::HourBucket;
use awsmp_pipeline::handlers::discoverer::DiscovererInput;
use chrono::{Datelike, Duration};

/// How close to an hour boundary a race may start.
const RACE_LEAD: Duration = Duration::minutes(10);
/// Events in the backlog.
const BACKLOG_EVENTS: u64 = 6;
/// Seconds past the hour at which expiry starts (its schedule's offset).
const EXPIRY_OFFSET_SECS: i64 = 5;

impl World {
    fn race_hash(&self, parts: &[&str]) -> u64 {
        hash(self.setup.seed ^ 0x0ace, parts)
    }

    /// The backlog of a race schedule: events stamped in the hour that leaves the window at
    /// the schedule's first hour boundary. Run once, before the first active step.
    pub fn race_backlog(&self) {
        if !self.setup.race {
            return;
        }
        let now = self.clock.now();
        let closing = if self.setup.race_grace {
            // The previous month's last hour: billable until the grace ends at 06:00.
            let month = now.date_naive().with_day(1).expect("day 1 exists");
            month.and_hms_opt(0, 0, 0).expect("midnight").and_utc() - Duration::hours(1)
        } else {
            HourBucket::containing(now)
                .minus_hours(i64::from(self.setup.window_hours) - 1)
                .start()
        };
        lock(&self.truth)
            .edge_hours
            .insert(HourBucket::containing(closing));
        for i in 0..BACKLOG_EVENTS {
            let h = self.race_hash(&["backlog", &i.to_string()]);
            let l = (h % self.setup.licenses as u64) as usize;
            let d = ((h >> 8) % DIMENSIONS.len() as u64) as usize;
            let q = 1 + (h >> 16) % 20;
            let at = closing + Duration::seconds(3000 + ((h >> 24) % 599) as i64);
            self.put_late(l, d, q, at);
        }
        self.log(format!(
            "race backlog: {BACKLOG_EVENTS} events stamped in the hour from {closing}"
        ));
    }

    /// Before the first race: the pipeline catches up with the backlog (deliveries, a meter
    /// run for the backlog's hour, the aggregator and cleanup on everything queued), faults
    /// off, so records of the closing hour are pending when the race starts. Without it the
    /// scheduler's random picks rarely bring the backlog that far in the minutes before the
    /// close, and the race has nothing to race on.
    async fn race_prepare(&self, boundary: chrono::DateTime<chrono::Utc>) {
        let Some(hour) = lock(&self.truth).edge_hours.iter().next().copied() else {
            return;
        };
        if lock(&self.truth).edge_prepared || boundary <= self.clock.now() {
            return;
        }
        lock(&self.truth).edge_prepared = true;
        // Fault-free (and so with no clock moves inside calls): under the schedule's faults
        // the backlog was often not yet committed when the race began, or the catch-up ran
        // past the boundary, and the race had nothing to race on.
        self.faults.set_enabled(false);
        let mut rounds = 0;
        while self.deliver().await && rounds < 20 {
            rounds += 1;
        }
        self.heartbeat();
        let now = self.clock.now();
        let offset = (HourBucket::containing(now).start() - hour.start()).num_hours();
        if let Ok(hour_offset) = u32::try_from(offset) {
            self.discover(DiscovererInput::Meter { hour_offset }).await;
        }
        for _ in 0..10 {
            if !self.aggregate().await {
                break;
            }
        }
        for _ in 0..10 {
            if !self.clean().await {
                break;
            }
        }
        self.faults.set_enabled(true);
        self.log("race: the pipeline caught up with the backlog");
    }

    /// One active step's chance of a race (a race schedule, within [`RACE_LEAD`] of an hour
    /// boundary, one step in two).
    pub async fn race_step(&self, step: usize) {
        if !self.setup.race {
            return;
        }
        let now = self.clock.now();
        let boundary = HourBucket::containing(now).start() + Duration::hours(1);
        let h = self.race_hash(&["race", &step.to_string()]);
        if boundary - now > RACE_LEAD || !h.is_multiple_of(2) {
            return;
        }
        self.race_prepare(boundary).await;
        let now = self.clock.now();
        if now >= boundary {
            return;
        }
        let lead = Duration::seconds(1 + ((h >> 8) % 30) as i64);
        if boundary - now > lead {
            self.clock.set(boundary - lead);
        }
        let waits = ((h >> 16) % 8) as u32;
        self.log(format!(
            "race: submitter at {}, expiry after {waits} yields at the hour + {EXPIRY_OFFSET_SECS} s",
            self.clock.now()
        ));
        self.faults.set_racing(true);
        let expiry = in_frame(RACE_FRAME, async {
            yield_times(waits).await;
            let at = boundary + Duration::seconds(EXPIRY_OFFSET_SECS);
            if self.clock.now() < at {
                self.clock.set(at);
            }
            self.expire().await;
        });
        futures::future::join(self.submit(), expiry).await;
        self.faults.set_racing(false);
        *lock(&self.interleavings).entry("race".into()).or_default() += 1;
    }
}
