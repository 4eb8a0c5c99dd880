//! The comparison table: one row per path of issue 7, bare vs Pinfold,
//! their difference, the goal and the method; printed, written as JSON and
//! plotted.

use std::fmt::Write as _;

use serde_json::{json, Value};

/// What a row's goal bounds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Goal {
    /// The Pinfold figure, at most this.
    AtMost(f64),
    /// Pinfold / bare, at most this.
    RatioAtMost(f64),
}

impl Goal {
    /// Whether the row meets the goal; `None` without the figures it needs.
    pub fn met(self, bare: Option<f64>, pinfold: Option<f64>) -> Option<bool> {
        match self {
            Goal::AtMost(limit) => pinfold.map(|p| p <= limit),
            Goal::RatioAtMost(limit) => ratio(bare, pinfold).map(|r| r <= limit),
        }
    }

    fn text(self) -> String {
        match self {
            Goal::AtMost(limit) => format!("<= {}", group(limit)),
            Goal::RatioAtMost(limit) => format!("ratio <= {limit:.2}"),
        }
    }

    fn json(self) -> Value {
        match self {
            Goal::AtMost(limit) => json!({ "pinfold_at_most": limit }),
            Goal::RatioAtMost(limit) => json!({ "ratio_at_most": limit }),
        }
    }
}

/// Whether two runs agreed, per column.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Repeat {
    /// `None` when the column was not measured twice.
    pub bare: Option<bool>,
    pub pinfold: Option<bool>,
}

impl Repeat {
    /// From each column's figures of every run: identical or not.
    pub fn of(bare: &[Option<f64>], pinfold: &[Option<f64>]) -> Self {
        let same =
            |runs: &[Option<f64>]| (runs.len() >= 2).then(|| runs.windows(2).all(|w| w[0] == w[1]));
        Self {
            bare: same(bare),
            pinfold: same(pinfold),
        }
    }

    pub fn differs(&self) -> bool {
        self.bare == Some(false) || self.pinfold == Some(false)
    }

    fn text(&self) -> &'static str {
        match (self.bare, self.pinfold) {
            _ if self.differs() => "DIFFER",
            (Some(true), Some(true)) => "same",
            (None, None) => "once",
            _ => "same*",
        }
    }
}

/// One path of the table.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    /// JSON key and plot label, e.g. `gicd_typer_read`.
    pub id: &'static str,
    /// The row as issue 7 names it.
    pub label: &'static str,
    /// A shorter label for the plot.
    pub short: &'static str,
    /// Instructions (the first run's, see `repeat`); `None` = not measured
    /// or not possible there ("-").
    pub bare: Option<f64>,
    pub pinfold: Option<f64>,
    pub goal: Option<Goal>,
    pub method: String,
    pub repeat: Repeat,
    /// Why a column is empty, when the run said so.
    pub note: Option<String>,
}

impl Row {
    pub fn diff(&self) -> Option<f64> {
        Some(self.pinfold? - self.bare?)
    }

    pub fn ratio(&self) -> Option<f64> {
        ratio(self.bare, self.pinfold)
    }

    pub fn goal_met(&self) -> Option<bool> {
        self.goal?.met(self.bare, self.pinfold)
    }

    pub fn json(&self) -> Value {
        json!({
            "id": self.id,
            "path": self.label,
            "bare_instructions": self.bare,
            "pinfold_instructions": self.pinfold,
            "difference_instructions": self.diff(),
            "ratio": self.ratio(),
            "goal": self.goal.map(Goal::json),
            "goal_met": self.goal_met(),
            "method": self.method,
            "identical_runs": { "bare": self.repeat.bare, "pinfold": self.repeat.pinfold },
            "note": self.note,
        })
    }
}

fn ratio(bare: Option<f64>, pinfold: Option<f64>) -> Option<f64> {
    let (bare, pinfold) = (bare?, pinfold?);
    (bare > 0.0).then(|| pinfold / bare)
}

/// A figure with thousands separators: integers as integers, others with
/// one decimal; `-` for none.
pub fn group(x: f64) -> String {
    if !x.is_finite() {
        return "-".into();
    }
    let rounded = (x * 10.0).round() / 10.0;
    let (int, frac) = if rounded.fract() == 0.0 {
        (rounded.abs() as u64, String::new())
    } else {
        let s = format!("{:.1}", rounded.abs());
        let (i, f) = s.split_once('.').unwrap_or((&s, "0"));
        (i.parse().unwrap_or(0), format!(".{f}"))
    };
    let digits = int.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    let sign = if rounded < 0.0 { "-" } else { "" };
    format!("{sign}{out}{frac}")
}

fn cell(x: Option<f64>) -> String {
    x.map_or_else(|| "-".into(), group)
}

/// The rows as a text table, then each row's method as a numbered note.
pub fn render(rows: &[Row]) -> String {
    let mut t = String::new();
    let label_width = rows.iter().map(|r| r.label.len()).max().unwrap_or(4).max(4);
    let _ = writeln!(
        t,
        "{:<label_width$} | {:>13} | {:>13} | {:>13} | {:>7} | {:>13} | {:>4} | {:>6} | note",
        "path", "bare", "Pinfold", "difference", "ratio", "goal", "met", "2 runs"
    );
    let _ = writeln!(t, "{}", "-".repeat(label_width + 94));
    for (i, row) in rows.iter().enumerate() {
        let met = match row.goal_met() {
            Some(true) => "yes",
            Some(false) => "NO",
            None => "-",
        };
        let diff = row.diff().map(|d| {
            if d > 0.0 {
                format!("+{}", group(d))
            } else {
                group(d)
            }
        });
        let _ = writeln!(
            t,
            "{:<label_width$} | {:>13} | {:>13} | {:>13} | {:>7} | {:>13} | {:>4} | {:>6} | [{}]",
            row.label,
            cell(row.bare),
            cell(row.pinfold),
            diff.unwrap_or_else(|| "-".into()),
            row.ratio()
                .map_or_else(|| "-".into(), |r| format!("{r:.3}")),
            row.goal.map_or_else(|| "-".into(), Goal::text),
            met,
            row.repeat.text(),
            i + 1
        );
    }
    let _ = writeln!(
        t,
        "(instructions; difference = Pinfold - bare; ratio = Pinfold / bare; goal on Pinfold; \
         2 runs: same = both columns repeated exactly, DIFFER = a column changed between runs)"
    );
    for (i, row) in rows.iter().enumerate() {
        let _ = writeln!(t, "[{}] {}", i + 1, row.method);
        if let Some(note) = &row.note {
            let _ = writeln!(t, "    note: {note}");
        }
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(bare: Option<f64>, pinfold: Option<f64>, goal: Goal) -> Row {
        Row {
            id: "x",
            label: "a path",
            short: "a path",
            bare,
            pinfold,
            goal: Some(goal),
            method: "m".into(),
            repeat: Repeat::default(),
            note: None,
        }
    }

    #[test]
    fn difference_and_ratio_need_both_columns() {
        let both = row(Some(3.0), Some(302.0), Goal::AtMost(120.0));
        let no_bare = row(None, Some(168.0), Goal::AtMost(100.0));

        assert_eq!(both.diff(), Some(299.0));
        assert_eq!(both.ratio(), Some(302.0 / 3.0));
        assert_eq!(no_bare.diff(), None);
        assert_eq!(no_bare.ratio(), None);
    }

    #[test]
    fn a_zero_bare_figure_has_no_ratio() {
        assert_eq!(row(Some(0.0), Some(5.0), Goal::AtMost(1.0)).ratio(), None);
    }

    #[test]
    fn absolute_goal_bounds_the_pinfold_figure() {
        assert_eq!(Goal::AtMost(120.0).met(Some(3.0), Some(120.0)), Some(true));
        assert_eq!(Goal::AtMost(120.0).met(Some(3.0), Some(120.5)), Some(false));
        assert_eq!(Goal::AtMost(120.0).met(Some(3.0), None), None);
    }

    #[test]
    fn ratio_goal_bounds_pinfold_over_bare() {
        let goal = Goal::RatioAtMost(1.01);

        assert_eq!(goal.met(Some(100.0), Some(101.0)), Some(true));
        assert_eq!(goal.met(Some(100.0), Some(101.9)), Some(false));
        assert_eq!(goal.met(None, Some(101.0)), None);
    }

    #[test]
    fn repeat_flags_any_column_that_changed() {
        let same = Repeat::of(&[Some(1.0), Some(1.0)], &[Some(2.0), Some(2.0)]);
        let differs = Repeat::of(&[Some(1.0), Some(1.0)], &[Some(2.0), Some(2.5)]);
        let once = Repeat::of(&[Some(1.0)], &[]);

        assert!(!same.differs());
        assert_eq!(same.text(), "same");
        assert!(differs.differs());
        assert_eq!(differs.text(), "DIFFER");
        assert_eq!(once, Repeat::default());
        assert_eq!(once.text(), "once");
    }

    #[test]
    fn a_figure_missing_in_one_run_is_a_difference() {
        assert!(Repeat::of(&[Some(1.0), None], &[]).differs());
    }

    #[test]
    fn figures_are_grouped_by_thousands() {
        assert_eq!(group(2_993_392.0), "2,993,392");
        assert_eq!(group(411.0), "411");
        assert_eq!(group(2.992), "3");
        assert_eq!(group(1234.56), "1,234.6");
        assert_eq!(group(-1500.0), "-1,500");
        assert_eq!(group(f64::NAN), "-");
    }

    #[test]
    fn table_shows_columns_goal_verdict_and_numbered_methods() {
        let rows = [
            row(Some(3.0), Some(302.0), Goal::AtMost(120.0)),
            Row {
                note: Some("QEMU answered nothing".into()),
                ..row(None, Some(99.0), Goal::AtMost(100.0))
            },
        ];

        let text = render(&rows);

        let first = text.lines().nth(2).unwrap_or_default();
        assert!(first.contains(" 3 | "), "{first}");
        assert!(first.contains("+299"), "{first}");
        assert!(first.contains("<= 120"), "{first}");
        assert!(first.contains("NO"), "{first}");
        assert!(
            text.lines().nth(3).unwrap_or_default().contains("yes"),
            "{text}"
        );
        assert!(
            text.contains("[2] m\n    note: QEMU answered nothing"),
            "{text}"
        );
    }

    #[test]
    fn json_row_carries_figures_goal_and_verdict() {
        let json = row(Some(100.0), Some(101.9), Goal::RatioAtMost(1.01)).json();

        let diff = json["difference_instructions"].as_f64().unwrap_or_default();
        assert!((diff - 1.9).abs() < 1e-9, "{json}");
        assert_eq!(json["goal"], json!({ "ratio_at_most": 1.01 }));
        assert_eq!(json["goal_met"], json!(false));
        assert_eq!(json["identical_runs"]["bare"], Value::Null);
    }
}
