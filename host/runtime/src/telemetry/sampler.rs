//! Which traces are kept: OpenTelemetry's samplers, as `OTEL_TRACES_SAMPLER` names them.

/// How a trace with no parent to follow is decided.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Rule {
    /// Every trace is kept.
    On,
    /// No trace is kept.
    Off,
    /// A share of the traces, 0 to 1, chosen by their trace id (OpenTelemetry's
    /// `TraceIdRatioBased`: the same trace is chosen alike on every host).
    Ratio(f64),
}

/// A sampler: a rule, and whether a parent's decision goes first.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Sampler {
    /// The rule for traces started here (and for every span, unless `parent_based`).
    pub rule: Rule,
    /// Whether a span with a parent (local or remote) follows the parent's decision.
    pub parent_based: bool,
}

impl Default for Sampler {
    /// OpenTelemetry's default: a parent's decision, else every trace.
    fn default() -> Sampler {
        Sampler::parent_based(Rule::On)
    }
}

impl Sampler {
    /// `rule`, after a parent's decision.
    pub fn parent_based(rule: Rule) -> Sampler {
        Sampler {
            rule,
            parent_based: true,
        }
    }

    /// Whether a span of `trace` is kept, whose parent decided `parent` (`None`: a root).
    pub fn keeps(&self, trace: u128, parent: Option<bool>) -> bool {
        if self.parent_based
            && let Some(sampled) = parent
        {
            return sampled;
        }
        match self.rule {
            Rule::On => true,
            Rule::Off => false,
            Rule::Ratio(r) => ratio_keeps(r, trace),
        }
    }

    /// The sampler `OTEL_TRACES_SAMPLER` names, with `OTEL_TRACES_SAMPLER_ARG` as the
    /// ratio, and a note when the value was not understood. As OpenTelemetry's SDK: an
    /// unknown sampler is the default one, a missing or malformed ratio is 1, a ratio above
    /// 1 keeps every trace and one below 0 none.
    pub fn from_env(name: &str, arg: Option<&str>) -> (Sampler, Option<String>) {
        let ratio = || match arg.map(str::trim).map(str::parse::<f64>) {
            Some(Ok(r)) if !r.is_nan() => (r, None),
            _ => (
                1.0,
                Some(format!(
                    "OTEL_TRACES_SAMPLER_ARG {arg:?} is not a ratio: keeping every trace"
                )),
            ),
        };
        let plain = |rule| Sampler {
            rule,
            parent_based: false,
        };
        match name.trim() {
            "always_on" => (plain(Rule::On), None),
            "always_off" => (plain(Rule::Off), None),
            "traceidratio" => {
                let (r, note) = ratio();
                (plain(Rule::Ratio(r)), note)
            }
            "parentbased_always_on" => (Sampler::parent_based(Rule::On), None),
            "parentbased_always_off" => (Sampler::parent_based(Rule::Off), None),
            "parentbased_traceidratio" => {
                let (r, note) = ratio();
                (Sampler::parent_based(Rule::Ratio(r)), note)
            }
            other => (
                Sampler::default(),
                Some(format!(
                    "OTEL_TRACES_SAMPLER `{other}` is not one this build has (always_on, \
                     always_off, traceidratio, parentbased_always_on, parentbased_always_off, \
                     parentbased_traceidratio): using parentbased_always_on"
                )),
            ),
        }
    }
}

/// Whether `TraceIdRatioBased(ratio)` keeps `trace`: the trace id's low 64 bits, shifted
/// right by one, below `ratio` × 2⁶³.
fn ratio_keeps(ratio: f64, trace: u128) -> bool {
    if ratio >= 1.0 {
        return true;
    }
    #[allow(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        clippy::cast_precision_loss,
        reason = "a ratio from 0 to 1 of 2^63 fits in u64; NaN and below 0 keep none"
    )]
    let bound = (ratio.max(0.0) * (1u64 << 63) as f64) as u64;
    #[allow(
        clippy::cast_possible_truncation,
        reason = "the trace id's low 64 bits, as OpenTelemetry reads them"
    )]
    let low = trace as u64;
    (low >> 1) < bound
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ratio_keeps_its_share_by_trace_id() {
        let ids: Vec<u128> = (0..20_000u64)
            .map(|i| u128::from(i.wrapping_mul(0x9e37_79b9_7f4a_7c15)) | 1 << 64)
            .collect();
        let kept = |s: Sampler| ids.iter().filter(|&&t| s.keeps(t, None)).count();
        assert_eq!(kept(Sampler::parent_based(Rule::Ratio(0.0))), 0);
        assert_eq!(kept(Sampler::parent_based(Rule::Ratio(1.0))), ids.len());
        let quarter = kept(Sampler::parent_based(Rule::Ratio(0.25)));
        assert!((4_500..5_500).contains(&quarter), "{quarter}");
        // The same trace is decided alike everywhere: by its id, and its low half only.
        let t = ids[7];
        let s = Sampler::parent_based(Rule::Ratio(0.5));
        assert_eq!(s.keeps(t, None), s.keeps(t ^ (5 << 70), None));
        assert!(!ratio_keeps(f64::NAN, t));
    }

    #[test]
    fn a_parent_s_decision_goes_first_when_parent_based() {
        let s = Sampler::default();
        assert!(s.keeps(1, None));
        assert!(!s.keeps(1, Some(false)));
        let off = Sampler::parent_based(Rule::Off);
        assert!(!off.keeps(1, None));
        assert!(off.keeps(1, Some(true)));
        let (on, note) = Sampler::from_env("always_on", None);
        assert_eq!(note, None);
        assert!(on.keeps(1, Some(false)));
    }

    #[test]
    fn the_environment_names_the_sampler() {
        let (s, note) = Sampler::from_env("parentbased_traceidratio", Some("0.1"));
        assert_eq!((s, note), (Sampler::parent_based(Rule::Ratio(0.1)), None));
        let (s, note) = Sampler::from_env("traceidratio", Some("a half"));
        assert_eq!(s.rule, Rule::Ratio(1.0));
        assert!(!s.parent_based);
        assert!(note.is_some());
        let (s, _) = Sampler::from_env("traceidratio", Some("2"));
        assert!(s.keeps(12345, Some(false)));
        let (s, note) = Sampler::from_env("always_off", None);
        assert_eq!(s.rule, Rule::Off);
        assert_eq!(note, None);
        let (s, note) = Sampler::from_env("xray", None);
        assert_eq!(s, Sampler::default());
        assert!(note.unwrap().contains("xray"));
    }
}
