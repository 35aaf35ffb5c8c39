//! The figures' plots. A figure describes what it plots as a [`Chart`] (panels of series of
//! points, with axis labels and a caption) and [`render`] writes it twice beside the figure's
//! result file: an SVG, whose text stays text, and a PNG for places that show no SVG.
//!
//! Text is drawn with one TrueType font read from a file ([`FONT_PATHS`], or the file named by
//! `ENSEMBLE_PLOT_FONT`). `scripts/setup.sh` installs DejaVu Sans (Debian's `fonts-dejavu-core`).
//! The font also sizes the text of the SVG, so both files are laid out alike.
//!
//! This crate depends on nothing of ours, so any crate that makes a figure can use it.

use plotters::coord::ranged1d::{DefaultFormatting, KeyPointHint, Ranged};
use plotters::coord::Shift;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use plotters::element::{Drawable, PointCollection};
use plotters::prelude::*;
use plotters_backend::{BackendCoord, DrawingErrorKind};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// Where the font is looked for, in order, after `ENSEMBLE_PLOT_FONT`.
pub const FONT_PATHS: [&str; 2] = ["/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf", "/usr/share/fonts/dejavu/DejaVuSans.ttf"];

/// A figure's plot: one caption over one or more panels side by side.
#[derive(Clone, Debug)]
pub struct Chart {
    pub caption: String,
    pub panels: Vec<Panel>,
    /// Pixels of one panel (the caption's band is added above).
    pub panel_size: (u32, u32),
}

/// One pair of axes.
#[derive(Clone, Debug, Default)]
pub struct Panel {
    /// Drawn above the panel; empty for none.
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    /// Tick marks at these x values with these labels (categories, or a transformed axis such
    /// as log2 of a count); `None` for evenly spaced numbers.
    pub x_ticks: Option<Vec<(f64, String)>>,
    pub y_scale: Scale,
    pub series: Vec<Series>,
    /// Legend entries that are no series: what a line style or marker means, drawn in grey.
    pub keys: Vec<Key>,
    pub legend: Corner,
}

/// A labelled set of points, drawn in one colour.
#[derive(Clone, Debug)]
pub struct Series {
    /// In the legend; `None` keeps it out.
    pub label: Option<String>,
    /// Points that are not finite (a class the run did not have) are left out.
    pub points: Vec<(f64, f64)>,
    /// Index into the palette.
    pub colour: usize,
    pub line: Line,
    pub marker: Marker,
}

impl Series {
    /// A solid line with a dot at each point.
    pub fn line(label: impl Into<String>, colour: usize, points: Vec<(f64, f64)>) -> Series {
        Series { label: Some(label.into()), points, colour, line: Line::Solid, marker: Marker::Circle }
    }

    /// Markers only.
    pub fn points(label: impl Into<String>, colour: usize, marker: Marker, points: Vec<(f64, f64)>) -> Series {
        Series { label: Some(label.into()), points, colour, line: Line::None, marker }
    }
}

/// A legend entry drawn in grey.
#[derive(Clone, Debug)]
pub struct Key {
    pub label: String,
    pub line: Line,
    pub marker: Marker,
}

impl Key {
    /// What a line style means.
    pub fn line(label: impl Into<String>, line: Line) -> Key {
        Key { label: label.into(), line, marker: Marker::None }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Line {
    Solid,
    Dashed,
    None,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Marker {
    None,
    Circle,
    Cross,
    Triangle,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Scale {
    /// From zero to above the highest point.
    #[default]
    Linear,
    /// Powers of ten; points at or below zero are left out.
    Log10,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Corner {
    #[default]
    UpperLeft,
    UpperRight,
    LowerLeft,
    LowerRight,
}

/// Matplotlib's default cycle: distinct in colour and in grey.
const PALETTE: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(148, 103, 189),
    RGBColor(255, 127, 14),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(23, 190, 207),
];
const GREY: RGBColor = RGBColor(90, 90, 90);

/// Writes `STEM.svg` and `STEM.png` and returns their paths.
pub fn render(chart: &Chart, stem: &Path) -> Result<[PathBuf; 2], String> {
    font()?;
    let with = |ext: &str| {
        let mut s: OsString = stem.as_os_str().to_owned();
        s.push(ext);
        PathBuf::from(s)
    };
    let (svg, png) = (with(".svg"), with(".png"));
    let size = chart.size();
    draw(SVGBackend::new(&svg, size).into_drawing_area(), chart).map_err(|e| format!("{}: {e}", svg.display()))?;
    let mut pixels = vec![0u8; size.0 as usize * size.1 as usize * 3];
    draw(BitMapBackend::with_buffer(&mut pixels, size).into_drawing_area(), chart).map_err(|e| format!("{}: {e}", png.display()))?;
    write_png(&png, size, &pixels).map_err(|e| format!("{}: {e}", png.display()))?;
    Ok([svg, png])
}

const CAPTION_PT: u32 = 20;
/// Height of one line of the caption, and the space above and below it (pixels).
const CAPTION_LINE: u32 = 26;
const CAPTION_PAD: u32 = 8;

impl Chart {
    fn width(&self) -> u32 {
        self.panel_size.0 * self.panels.len().max(1) as u32
    }

    fn size(&self) -> (u32, u32) {
        let lines = self.caption_lines().len() as u32;
        (self.width(), self.panel_size.1 + 2 * CAPTION_PAD + lines * CAPTION_LINE)
    }

    /// The caption broken at spaces into lines as wide as the chart, less a margin.
    fn caption_lines(&self) -> Vec<String> {
        let font = ("sans-serif", CAPTION_PT).into_font();
        let fits = |line: &str| font.box_size(line).map_or(true, |(w, _)| w + 24 <= self.width());
        let mut lines: Vec<String> = Vec::new();
        for word in self.caption.split(' ') {
            match lines.last_mut() {
                Some(line) if fits(&format!("{line} {word}")) => {
                    line.push(' ');
                    line.push_str(word);
                }
                _ => lines.push(word.to_string()),
            }
        }
        lines
    }
}

/// Registers the font once per process; plotters keeps it for every later chart.
fn font() -> Result<(), String> {
    static FONT: OnceLock<Result<(), String>> = OnceLock::new();
    FONT.get_or_init(|| {
        let named = std::env::var_os("ENSEMBLE_PLOT_FONT").map(PathBuf::from);
        let candidates: Vec<PathBuf> = named.into_iter().chain(FONT_PATHS.iter().map(PathBuf::from)).collect();
        let Some((path, bytes)) = candidates.iter().find_map(|p| std::fs::read(p).ok().map(|b| (p, b))) else {
            return Err(format!(
                "no font for the plots: none of {} could be read (scripts/setup.sh installs fonts-dejavu-core; ENSEMBLE_PLOT_FONT names another TTF)",
                candidates.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")
            ));
        };
        // plotters holds registered fonts for the whole process, so it asks for 'static bytes;
        // this runs once.
        let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
        plotters::style::register_font("sans-serif", FontStyle::Normal, bytes)
            .map_err(|_| format!("{}: not a font plotters can read", path.display()))
    })
    .clone()
}

fn write_png(path: &Path, (w, h): (u32, u32), rgb: &[u8]) -> Result<(), String> {
    let file = std::fs::File::create(path).map_err(|e| e.to_string())?;
    let mut encoder = png::Encoder::new(std::io::BufWriter::new(file), w, h);
    encoder.set_color(png::ColorType::Rgb);
    encoder.set_depth(png::BitDepth::Eight);
    let mut writer = encoder.write_header().map_err(|e| e.to_string())?;
    writer.write_image_data(rgb).map_err(|e| e.to_string())?;
    writer.finish().map_err(|e| e.to_string())
}

fn draw<DB: DrawingBackend>(root: DrawingArea<DB, Shift>, chart: &Chart) -> Result<(), String> {
    let e = |x: DrawingAreaErrorKind<DB::ErrorType>| x.to_string();
    root.fill(&WHITE).map_err(e)?;
    let lines = chart.caption_lines();
    let (band, body) = root.split_vertically(2 * CAPTION_PAD + lines.len() as u32 * CAPTION_LINE);
    let centre = chart.width() as i32 / 2;
    let style = ("sans-serif", CAPTION_PT).into_font().color(&BLACK).pos(Pos::new(HPos::Center, VPos::Top));
    for (i, line) in lines.iter().enumerate() {
        band.draw_text(line, &style, (centre, (CAPTION_PAD + i as u32 * CAPTION_LINE) as i32)).map_err(e)?;
    }
    for (area, panel) in body.split_evenly((1, chart.panels.len().max(1))).iter().zip(&chart.panels) {
        draw_panel(area, panel).map_err(e)?;
    }
    root.present().map_err(e)
}

/// Tick values between `lo` and `hi`: steps of 1, 2 or 5 times a power of ten, at most `most`.
fn nice_ticks(lo: f64, hi: f64, most: usize) -> Vec<f64> {
    let span = (hi - lo).max(f64::MIN_POSITIVE);
    let raw = span / most.max(1) as f64;
    let power = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0].iter().map(|m| m * power).find(|s| span / s <= most as f64).unwrap_or(10.0 * power);
    let first = (lo / step).ceil() as i64;
    let last = (hi / step).floor() as i64;
    (first..=last).map(|i| i as f64 * step).collect()
}

fn number(v: f64) -> String {
    if v == 0.0 {
        "0".into()
    } else if v.abs() >= 1e6 {
        format!("{v:.0e}")
    } else if v.fract().abs() < 1e-9 {
        format!("{v:.0}")
    } else {
        let s = format!("{v:.3}");
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    }
}

fn draw_panel<DB: DrawingBackend>(area: &DrawingArea<DB, Shift>, panel: &Panel) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    let y_of = |y: f64| match panel.y_scale {
        Scale::Linear => y,
        Scale::Log10 if y > 0.0 => y.log10(),
        Scale::Log10 => f64::NAN,
    };
    let shown: Vec<Vec<(f64, f64)>> = panel
        .series
        .iter()
        .map(|s| s.points.iter().map(|&(x, y)| (x, y_of(y))).filter(|(x, y)| x.is_finite() && y.is_finite()).collect())
        .collect();
    let all = || shown.iter().flatten();
    let xs = all().map(|p| p.0).chain(panel.x_ticks.iter().flatten().map(|t| t.0));
    let (x0, x1) = xs.fold((f64::MAX, f64::MIN), |(a, b), x| (a.min(x), b.max(x)));
    let (x0, x1) = if x0 > x1 { (0.0, 1.0) } else { (x0, x1) };
    let pad = if panel.x_ticks.is_some() { 0.5 } else { ((x1 - x0) * 0.05).max(0.5) };
    let x_range = (x0 - pad)..(x1 + pad);
    let y_top = all().map(|p| p.1).fold(f64::MIN, f64::max);
    let legend_rows = panel.series.iter().filter(|s| s.label.is_some()).count() + panel.keys.len();
    // Headroom above the data for the legend, which takes a corner of the panel.
    let headroom = 1.15 + 0.06 * legend_rows as f64;
    let y_range = match panel.y_scale {
        Scale::Linear => 0.0..(y_top.max(1e-9) * headroom),
        Scale::Log10 => {
            let y_low = all().map(|p| p.1).fold(f64::MAX, f64::min);
            let (lo, hi) = if y_low > y_top { (0.0, 1.0) } else { (y_low.floor(), y_top.ceil().max(y_low.floor() + 1.0)) };
            lo..(lo + (hi - lo) * headroom)
        }
    };
    let x_keys: Vec<f64> = match &panel.x_ticks {
        Some(t) => t.iter().map(|t| t.0).collect(),
        None => nice_ticks(x_range.start, x_range.end, 8),
    };
    let y_keys: Vec<f64> = match panel.y_scale {
        Scale::Linear => nice_ticks(y_range.start, y_range.end, 8),
        Scale::Log10 => (y_range.start.ceil() as i64..=y_range.end.floor() as i64).map(|k| k as f64).collect(),
    };
    let mut builder = ChartBuilder::on(area);
    builder.margin(12).x_label_area_size(40).y_label_area_size(64);
    if !panel.title.is_empty() {
        builder.caption(&panel.title, ("sans-serif", 16));
    }
    let mut chart = builder.build_cartesian_2d(Axis { range: x_range, ticks: x_keys }, Axis { range: y_range, ticks: y_keys })?;
    let x_label = |x: &f64| match &panel.x_ticks {
        Some(t) => t.iter().find(|t| (t.0 - x).abs() < 1e-9).map(|t| t.1.clone()).unwrap_or_default(),
        None => number(*x),
    };
    let y_label = |y: &f64| match panel.y_scale {
        Scale::Linear => number(*y),
        Scale::Log10 => number(10f64.powf(*y)),
    };
    chart
        .configure_mesh()
        .light_line_style(TRANSPARENT)
        .bold_line_style(RGBColor(225, 225, 225))
        .x_label_formatter(&x_label)
        .y_label_formatter(&y_label)
        .x_desc(panel.x_label.as_str())
        .y_desc(panel.y_label.as_str())
        .label_style(("sans-serif", 13))
        .axis_desc_style(("sans-serif", 14))
        .draw()?;
    for (s, points) in panel.series.iter().zip(&shown) {
        let colour = PALETTE[s.colour % PALETTE.len()];
        match s.line {
            Line::Solid => {
                chart.draw_series(LineSeries::new(points.iter().copied(), colour.stroke_width(2)))?;
            }
            Line::Dashed => {
                chart.draw_series(DashedLineSeries::new(points.iter().copied(), 5, 4, colour.stroke_width(2)))?;
            }
            Line::None => {}
        }
        let drawn = match s.marker {
            Marker::None => chart.draw_series(std::iter::empty::<Circle<(f64, f64), i32>>())?,
            Marker::Circle => chart.draw_series(points.iter().map(|&p| Circle::new(p, 3, colour.filled())))?,
            Marker::Cross => chart.draw_series(points.iter().map(|&p| Cross::new(p, 5, colour.stroke_width(2))))?,
            Marker::Triangle => chart.draw_series(points.iter().map(|&p| TriangleMarker::new(p, 5, colour.filled())))?,
        };
        if let Some(label) = &s.label {
            let (line, marker) = (s.line, s.marker);
            drawn.label(label.as_str()).legend(move |(x, y)| legend_glyph(x, y, colour, line, marker));
        }
    }
    for k in &panel.keys {
        let (line, marker) = (k.line, k.marker);
        chart
            .draw_series(std::iter::empty::<Circle<(f64, f64), i32>>())?
            .label(k.label.as_str())
            .legend(move |(x, y)| legend_glyph(x, y, GREY, line, marker));
    }
    if legend_rows > 0 {
        chart
            .configure_series_labels()
            .position(match panel.legend {
                Corner::UpperLeft => SeriesLabelPosition::UpperLeft,
                Corner::UpperRight => SeriesLabelPosition::UpperRight,
                Corner::LowerLeft => SeriesLabelPosition::LowerLeft,
                Corner::LowerRight => SeriesLabelPosition::LowerRight,
            })
            .label_font(("sans-serif", 13))
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .draw()?;
    }
    Ok(())
}

/// A linear axis with the tick marks the panel chose. (plotters' own key points on an f64 range
/// cannot be told where to go, and its `WithKeyPoints` loses the label formatter.)
struct Axis {
    range: std::ops::Range<f64>,
    ticks: Vec<f64>,
}

impl Ranged for Axis {
    type FormatOption = DefaultFormatting;
    type ValueType = f64;

    fn map(&self, v: &f64, (from, to): (i32, i32)) -> i32 {
        let share = (v - self.range.start) / (self.range.end - self.range.start);
        from + (share * f64::from(to - from)).round() as i32
    }

    fn key_points<Hint: KeyPointHint>(&self, hint: Hint) -> Vec<f64> {
        // Light points are the faint grid between ticks, which these charts leave out.
        if hint.weight().allow_light_points() {
            vec![]
        } else {
            self.ticks.clone()
        }
    }

    fn range(&self) -> std::ops::Range<f64> {
        self.range.clone()
    }
}

/// A legend entry's sample: the line over 20 pixels with the marker in its middle.
struct Glyph {
    at: (i32, i32),
    colour: RGBColor,
    line: Line,
    marker: Marker,
}

fn legend_glyph(x: i32, y: i32, colour: RGBColor, line: Line, marker: Marker) -> Glyph {
    Glyph { at: (x, y), colour, line, marker }
}

impl<'a> PointCollection<'a, (i32, i32)> for &'a Glyph {
    type Point = &'a (i32, i32);
    type IntoIter = std::iter::Once<&'a (i32, i32)>;
    fn point_iter(self) -> Self::IntoIter {
        std::iter::once(&self.at)
    }
}

impl<DB: DrawingBackend> Drawable<DB> for Glyph {
    fn draw<I: Iterator<Item = BackendCoord>>(&self, mut pos: I, backend: &mut DB, _: (u32, u32)) -> Result<(), DrawingErrorKind<DB::ErrorType>> {
        let Some((x, y)) = pos.next() else { return Ok(()) };
        let stroke = self.colour.stroke_width(2);
        match self.line {
            Line::Solid => backend.draw_line((x, y), (x + 20, y), &stroke)?,
            Line::Dashed => {
                backend.draw_line((x, y), (x + 6, y), &stroke)?;
                backend.draw_line((x + 13, y), (x + 20, y), &stroke)?;
            }
            Line::None => {}
        }
        let (cx, cy) = (x + 10, y);
        match self.marker {
            Marker::None => {}
            Marker::Circle => backend.draw_circle((cx, cy), 3, &self.colour.filled(), true)?,
            Marker::Cross => {
                backend.draw_line((cx - 4, cy - 4), (cx + 4, cy + 4), &stroke)?;
                backend.draw_line((cx - 4, cy + 4), (cx + 4, cy - 4), &stroke)?;
            }
            Marker::Triangle => backend.fill_polygon([(cx, cy - 5), (cx - 5, cy + 4), (cx + 5, cy + 4)], &self.colour.filled())?,
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiny(caption: &str) -> Chart {
        Chart {
            caption: caption.into(),
            panels: vec![Panel {
                title: "a panel".into(),
                x_label: "clients".into(),
                y_label: "latency (ms)".into(),
                series: vec![
                    Series::line("ours", 0, vec![(1.0, 10.0), (2.0, 30.0), (4.0, f64::NAN)]),
                    Series { label: None, line: Line::Dashed, marker: Marker::None, ..Series::line("", 1, vec![(1.0, 5.0), (4.0, 7.0)]) },
                    Series::points("paper", 2, Marker::Triangle, vec![(2.0, 20.0)]),
                ],
                keys: vec![Key { label: "dashed: first".into(), line: Line::Dashed, marker: Marker::None }],
                ..Panel::default()
            }],
            panel_size: (400, 300),
        }
    }

    #[test]
    fn writes_an_svg_and_a_png_with_the_caption() {
        let dir = tempfile::tempdir().unwrap();
        let [svg, png] = render(&tiny("Tiny figure 1"), &dir.path().join("figure-tiny-seed1")).unwrap();
        assert_eq!(svg, dir.path().join("figure-tiny-seed1.svg"));
        let text = std::fs::read_to_string(&svg).unwrap();
        assert!(text.starts_with("<svg") && text.contains("Tiny figure 1") && text.contains("a panel") && text.contains("dashed: first"));
        let bytes = std::fs::read(&png).unwrap();
        assert_eq!(&bytes[1..4], b"PNG");
        // Something was drawn in the PNG: not every pixel is the white background.
        let decoder = png::Decoder::new(std::io::Cursor::new(bytes));
        let mut reader = decoder.read_info().unwrap();
        let mut buf = vec![0; reader.output_buffer_size()];
        reader.next_frame(&mut buf).unwrap();
        assert_eq!(reader.info().width, 400);
        assert!(buf.iter().filter(|&&b| b < 128).count() > 500);
    }

    #[test]
    fn log_axes_and_categories_render() {
        let mut c = tiny("Categories");
        c.panels[0].y_scale = Scale::Log10;
        c.panels[0].x_ticks = Some(vec![(1.0, "one".into()), (2.0, "two".into()), (4.0, "four".into())]);
        let dir = tempfile::tempdir().unwrap();
        let [svg, _] = render(&c, &dir.path().join("c")).unwrap();
        let text = std::fs::read_to_string(svg).unwrap();
        let labels = texts(&text);
        assert!(labels.contains(&"four") && labels.contains(&"10") && labels.contains(&"100"), "{labels:?}");
    }

    /// The text elements' contents.
    fn texts(svg: &str) -> Vec<&str> {
        svg.split("<text").skip(1).filter_map(|t| t.split_once('>').and_then(|(_, rest)| rest.split_once("</text>")).map(|(inner, _)| inner.trim())).collect()
    }

    #[test]
    fn a_long_caption_wraps_within_the_width() {
        font().unwrap();
        let mut c = tiny("Gyro Fig. 4: micro-benchmark latency against throughput as clients are added (wan5, 3 instances)");
        let lines = c.caption_lines();
        assert!(lines.len() >= 2, "{lines:?}");
        assert_eq!(lines.join(" "), c.caption);
        let font = ("sans-serif", CAPTION_PT).into_font();
        assert!(lines.iter().all(|l| font.box_size(l).unwrap().0 <= 400), "{lines:?}");
        c.panel_size.0 = 2000;
        assert_eq!(c.caption_lines().len(), 1);
        assert_eq!(c.size().1, 300 + 2 * CAPTION_PAD + CAPTION_LINE);
    }

    #[test]
    fn ticks_are_round() {
        assert_eq!(nice_ticks(0.0, 10.0, 5), vec![0.0, 2.0, 4.0, 6.0, 8.0, 10.0]);
        assert_eq!(nice_ticks(-0.3, 1234.0, 8), (0..=6).map(|i| i as f64 * 200.0).collect::<Vec<_>>());
        assert_eq!(number(2000.0), "2000");
        assert_eq!(number(0.25), "0.25");
    }
}
