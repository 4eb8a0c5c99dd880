//! `target/pinfold/bench.svg`: the table's rows as a horizontal bar chart,
//! bare and Pinfold per path on a log scale (the rows span 3 to 10^9
//! instructions), with each row's absolute goal marked. Hand-written SVG.

use std::fmt::Write as _;

use super::table::{group, Goal, Row};

const WIDTH: f64 = 960.0;
const LABEL_WIDTH: f64 = 330.0;
const RIGHT_MARGIN: f64 = 110.0;
const TOP: f64 = 58.0;
const ROW_HEIGHT: f64 = 46.0;
const BAR_HEIGHT: f64 = 15.0;
const BARE_COLOUR: &str = "#8c8c8c";
const PINFOLD_COLOUR: &str = "#1f6fb4";
const GOAL_COLOUR: &str = "#d62728";

/// The chart of `rows`; `title` goes on top (e.g. the QEMU version).
pub fn chart(rows: &[Row], title: &str) -> String {
    let max = rows
        .iter()
        .flat_map(|r| [r.bare, r.pinfold])
        .flatten()
        .fold(1.0f64, f64::max);
    let decades = max.log10().ceil().max(1.0);
    let plot = WIDTH - LABEL_WIDTH - RIGHT_MARGIN;
    // Values below 1 (including 0) sit at the axis origin.
    let x = |v: f64| LABEL_WIDTH + plot * (v.max(1.0).log10() / decades);
    let height = TOP + ROW_HEIGHT * rows.len() as f64 + 40.0;

    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(s, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        s,
        r#"<text x="10" y="20" font-size="15" font-weight="bold">{}</text>"#,
        escape(title)
    );
    let _ = writeln!(
        s,
        r#"<text x="10" y="38">instructions per path (log scale; QEMU -icount shift=0: 1 instruction = 1 ns)</text>"#
    );
    legend(&mut s, WIDTH - RIGHT_MARGIN - 250.0, 34.0);

    let bottom = TOP + ROW_HEIGHT * rows.len() as f64;
    for decade in 0..=decades as u32 {
        let v = 10f64.powi(decade as i32);
        let gx = x(v);
        let _ = writeln!(
            s,
            r##"<line x1="{gx:.1}" y1="{TOP}" x2="{gx:.1}" y2="{bottom}" stroke="#dddddd"/>"##
        );
        let _ = writeln!(
            s,
            r#"<text x="{gx:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
            bottom + 16.0,
            decade_label(decade)
        );
    }

    for (i, row) in rows.iter().enumerate() {
        let y = TOP + ROW_HEIGHT * i as f64 + 6.0;
        let _ = writeln!(
            s,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"#,
            LABEL_WIDTH - 8.0,
            y + BAR_HEIGHT + 4.0,
            escape(row.short)
        );
        if let (Some(Goal::RatioAtMost(limit)), Some(ratio)) = (row.goal, row.ratio()) {
            let _ = writeln!(
                s,
                r#"<text x="{:.1}" y="{:.1}" text-anchor="end" fill="{GOAL_COLOUR}">ratio {ratio:.3} (goal &lt;= {limit:.2})</text>"#,
                LABEL_WIDTH - 8.0,
                y + 2.0 * BAR_HEIGHT + 4.0
            );
        }
        for (j, (value, colour)) in [(row.bare, BARE_COLOUR), (row.pinfold, PINFOLD_COLOUR)]
            .into_iter()
            .enumerate()
        {
            let by = y + j as f64 * (BAR_HEIGHT + 2.0);
            let text = match value {
                Some(v) => {
                    let end = x(v);
                    let _ = writeln!(
                        s,
                        r#"<rect x="{LABEL_WIDTH}" y="{by:.1}" width="{:.1}" height="{BAR_HEIGHT}" fill="{colour}"/>"#,
                        (end - LABEL_WIDTH).max(0.5)
                    );
                    (end, group(v))
                }
                None => (LABEL_WIDTH, "-".to_string()),
            };
            let _ = writeln!(
                s,
                r#"<text x="{:.1}" y="{:.1}">{}</text>"#,
                text.0 + 4.0,
                by + BAR_HEIGHT - 3.0,
                text.1
            );
        }
        if let Some(Goal::AtMost(limit)) = row.goal {
            let gx = x(limit);
            let _ = writeln!(
                s,
                r#"<line x1="{gx:.1}" y1="{:.1}" x2="{gx:.1}" y2="{:.1}" stroke="{GOAL_COLOUR}" stroke-width="2"><title>goal &lt;= {}</title></line>"#,
                y - 2.0,
                y + 2.0 * BAR_HEIGHT + 4.0,
                group(limit)
            );
        }
    }
    let _ = writeln!(s, "</svg>");
    s
}

fn legend(s: &mut String, x: f64, y: f64) {
    for (i, (name, colour)) in [
        ("bare EL1", BARE_COLOUR),
        ("Pinfold partition", PINFOLD_COLOUR),
    ]
    .into_iter()
    .enumerate()
    {
        let lx = x + i as f64 * 100.0;
        let _ = writeln!(
            s,
            r#"<rect x="{lx:.1}" y="{:.1}" width="12" height="12" fill="{colour}"/><text x="{:.1}" y="{y:.1}">{name}</text>"#,
            y - 10.0,
            lx + 16.0
        );
    }
    let lx = x + 230.0;
    let _ = writeln!(
        s,
        r#"<line x1="{lx:.1}" y1="{:.1}" x2="{lx:.1}" y2="{:.1}" stroke="{GOAL_COLOUR}" stroke-width="2"/><text x="{:.1}" y="{y:.1}">goal</text>"#,
        y - 12.0,
        y + 2.0,
        lx + 5.0
    );
}

fn decade_label(decade: u32) -> String {
    match decade {
        0..=2 => 10u64.pow(decade).to_string(),
        3..=5 => format!("{}k", 10u64.pow(decade - 3)),
        6..=8 => format!("{}M", 10u64.pow(decade - 6)),
        9..=11 => format!("{}G", 10u64.pow(decade - 9)),
        _ => format!("1e{decade}"),
    }
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::table::Repeat;

    fn row(short: &'static str, bare: Option<f64>, pinfold: Option<f64>) -> Row {
        Row {
            id: "x",
            label: "the long label",
            short,
            bare,
            pinfold,
            goal: Some(Goal::AtMost(100.0)),
            method: String::new(),
            repeat: Repeat::default(),
            note: None,
        }
    }

    fn widths(svg: &str, colour: &str) -> Vec<f64> {
        svg.lines()
            .filter(|l| l.starts_with("<rect x=\"330\"") && l.contains(colour))
            .filter_map(|l| {
                let rest = &l[l.find("width=\"")? + 7..];
                rest[..rest.find('"')?].parse().ok()
            })
            .collect()
    }

    #[test]
    fn bars_are_log_scaled_to_the_largest_decade() {
        // 1000 fills the plot (3 decades), 10 a third of it.
        let svg = chart(&[row("a", Some(10.0), Some(1000.0))], "t");

        let plot = WIDTH - LABEL_WIDTH - RIGHT_MARGIN;
        assert_eq!(
            widths(&svg, BARE_COLOUR),
            [(plot / 3.0 * 10.0).round() / 10.0]
        );
        assert_eq!(widths(&svg, PINFOLD_COLOUR), [plot]);
    }

    #[test]
    fn a_missing_figure_has_no_bar_and_a_dash() {
        let svg = chart(&[row("hvc", None, Some(168.0))], "t");

        assert!(widths(&svg, BARE_COLOUR).is_empty());
        assert_eq!(widths(&svg, PINFOLD_COLOUR).len(), 1);
        assert!(svg.contains(">-</text>"), "{svg}");
    }

    #[test]
    fn labels_are_escaped_and_goals_marked() {
        let svg = chart(&[row("CVAL -> <handler>", Some(3.0), Some(411.0))], "a & b");

        assert!(svg.contains("CVAL -&gt; &lt;handler&gt;"));
        assert!(svg.contains("a &amp; b"));
        assert!(svg.contains("goal &lt;= 100"));
        assert!(svg.starts_with("<svg ") && svg.trim_end().ends_with("</svg>"));
    }

    #[test]
    fn a_ratio_goal_is_written_under_the_label() {
        let svg = chart(
            &[Row {
                goal: Some(Goal::RatioAtMost(1.01)),
                ..row("linux", Some(100.0), Some(101.1))
            }],
            "t",
        );

        assert!(svg.contains("ratio 1.011 (goal &lt;= 1.01)"), "{svg}");
        assert!(!svg.contains("the long label"));
    }

    #[test]
    fn decades_are_labelled_with_k_and_m() {
        assert_eq!(decade_label(0), "1");
        assert_eq!(decade_label(4), "10k");
        assert_eq!(decade_label(8), "100M");
        assert_eq!(decade_label(9), "1G");
        assert_eq!(decade_label(12), "1e12");
    }
}
