//! How busy the local DynamoDB emulator was while the consumer consumed: its threads' time on
//! a CPU (`/proc/<pid>/task/<tid>/schedstat`, first field, nanoseconds; Linux,
//! <https://docs.kernel.org/scheduler/sched-stats.html>) over the wall time, beside the
//! machine's one-minute load average (`/proc/loadavg`). The emulator answers one request at a
//! time, so when it is on a CPU about as much as the machine's load lets one process be, its
//! share of the machine is what bounds the consumer's store calls.

use std::time::Instant;

/// A running measurement of one process.
#[derive(Debug)]
pub(super) struct CpuWatch {
    pid: u32,
    on_cpu_ns: u64,
    started: Instant,
}

/// What a measurement found.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct ProcessCpu {
    /// Cores the emulator was on, on average (1.0 = one core all the time).
    pub(super) cores: f64,
    /// The machine's one-minute load average at the end.
    pub(super) load_average: f64,
    /// Logical CPUs of the machine.
    pub(super) cpus: usize,
}

/// Nanoseconds on a CPU of every thread of `pid` (a thread that ended meanwhile drops out).
fn on_cpu_ns(pid: u32) -> Option<u64> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).ok()?;
    let mut total = 0;
    for task in tasks.flatten() {
        let Ok(text) = std::fs::read_to_string(task.path().join("schedstat")) else {
            continue;
        };
        total += text
            .split_whitespace()
            .next()
            .and_then(|n| n.parse::<u64>().ok())
            .unwrap_or(0);
    }
    Some(total)
}

fn load_average() -> Option<f64> {
    let text = std::fs::read_to_string("/proc/loadavg").ok()?;
    text.split_whitespace().next()?.parse().ok()
}

impl CpuWatch {
    /// Start measuring `pid`; `None` where the process or `/proc` is not readable.
    pub(super) fn start(pid: u32) -> Option<Self> {
        Some(Self {
            pid,
            on_cpu_ns: on_cpu_ns(pid)?,
            started: Instant::now(),
        })
    }

    /// The emulator's average CPU since the start.
    pub(super) fn stop(self) -> Option<ProcessCpu> {
        let wall = self.started.elapsed().as_secs_f64();
        let on_cpu = on_cpu_ns(self.pid)?.saturating_sub(self.on_cpu_ns) as f64 / 1e9;
        (wall > 0.0).then(|| ProcessCpu {
            cores: on_cpu / wall,
            load_average: load_average().unwrap_or(0.0),
            cpus: std::thread::available_parallelism().map_or(1, usize::from),
        })
    }
}

impl ProcessCpu {
    /// One clause for the report.
    pub(super) fn describe(&self) -> String {
        format!(
            "the DynamoDB emulator was on a CPU {:.0} % of the time while consuming, on a machine of {} CPUs at load average {:.1}",
            self.cores * 100.0,
            self.cpus,
            self.load_average
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_busy_process_measures_above_zero_and_describes_itself() {
        // GIVEN this process, busy for a moment
        let watch = CpuWatch::start(std::process::id()).expect("/proc is readable");
        let started = Instant::now();
        let mut x = 0_u64;
        while started.elapsed().as_millis() < 50 {
            x = x.wrapping_mul(31).wrapping_add(7);
        }
        std::hint::black_box(x);
        // WHEN it stops THEN it was on a CPU, and the clause says so
        let cpu = watch.stop().expect("measured");
        assert!(cpu.cores > 0.0, "{cpu:?}");
        assert!(cpu.describe().contains("% of the time while consuming"));
    }
}
