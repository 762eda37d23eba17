//! A latency CDF as a PNG, drawn without a plotting library: a few lines on an RGB canvas, tick
//! labels in a 3×5 pixel font, the image deflated by flate2 (already in the dependency tree).

use std::io::Write;

const W: usize = 820;
const H: usize = 520;
const LEFT: usize = 70;
const RIGHT: usize = 20;
const TOP: usize = 40;
const BOTTOM: usize = 60;

pub const COLOURS: [[u8; 3]; 4] = [
    [31, 119, 180],
    [214, 39, 40],
    [44, 160, 44],
    [148, 103, 189],
];

struct Canvas {
    px: Vec<u8>,
}

impl Canvas {
    fn new() -> Canvas {
        Canvas {
            px: vec![255; W * H * 3],
        }
    }

    fn set(&mut self, x: i64, y: i64, c: [u8; 3]) {
        if x >= 0 && y >= 0 && (x as usize) < W && (y as usize) < H {
            let i = (y as usize * W + x as usize) * 3;
            self.px[i..i + 3].copy_from_slice(&c);
        }
    }

    /// Bresenham, `thick` pixels wide.
    fn line(&mut self, (x0, y0): (i64, i64), (x1, y1): (i64, i64), c: [u8; 3], thick: i64) {
        let (dx, dy) = ((x1 - x0).abs(), -(y1 - y0).abs());
        let (sx, sy) = (if x0 < x1 { 1 } else { -1 }, if y0 < y1 { 1 } else { -1 });
        let (mut x, mut y, mut err) = (x0, y0, dx + dy);
        loop {
            for t in 0..thick {
                self.set(x + t / 2 - (thick - 1) / 2, y, c);
                self.set(x, y + t / 2 - (thick - 1) / 2, c);
            }
            if x == x1 && y == y1 {
                break;
            }
            let e2 = 2 * err;
            if e2 >= dy {
                err += dy;
                x += sx;
            }
            if e2 <= dx {
                err += dx;
                y += sy;
            }
        }
    }

    /// Text in the 3×5 font at `scale`, top-left at (x, y).
    fn text(&mut self, x: i64, y: i64, s: &str, c: [u8; 3], scale: i64) {
        for (i, ch) in s.chars().enumerate() {
            let rows = glyph(ch);
            for (r, bits) in rows.iter().enumerate() {
                for col in 0..3 {
                    if bits & (0b100 >> col) != 0 {
                        for a in 0..scale {
                            for b in 0..scale {
                                self.set(
                                    x + (i as i64 * 4 + col) * scale + a,
                                    y + r as i64 * scale + b,
                                    c,
                                );
                            }
                        }
                    }
                }
            }
        }
    }

    fn text_width(s: &str, scale: i64) -> i64 {
        (s.chars().count() as i64 * 4 - 1) * scale
    }

    fn png(&self) -> Vec<u8> {
        let mut raw = Vec::with_capacity((W * 3 + 1) * H);
        for row in self.px.chunks(W * 3) {
            raw.push(0); // filter: none
            raw.extend_from_slice(row);
        }
        let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
        z.write_all(&raw).expect("deflate into memory");
        let idat = z.finish().expect("deflate into memory");
        let mut out = b"\x89PNG\r\n\x1a\n".to_vec();
        let mut ihdr = Vec::new();
        ihdr.extend_from_slice(&(W as u32).to_be_bytes());
        ihdr.extend_from_slice(&(H as u32).to_be_bytes());
        ihdr.extend_from_slice(&[8, 2, 0, 0, 0]); // 8-bit RGB, deflate, no filter, no interlace
        for (kind, data) in [(b"IHDR", &ihdr), (b"IDAT", &idat), (b"IEND", &Vec::new())] {
            out.extend_from_slice(&(data.len() as u32).to_be_bytes());
            let mut crc = crc32fast::Hasher::new();
            crc.update(kind);
            crc.update(data);
            out.extend_from_slice(kind);
            out.extend_from_slice(data);
            out.extend_from_slice(&crc.finalize().to_be_bytes());
        }
        out
    }
}

/// A 3×5 font: each row's three bits, left pixel first. Lower case is drawn as upper case;
/// characters it lacks are blank.
fn glyph(c: char) -> [u8; 5] {
    match c.to_ascii_uppercase() {
        '0' => [7, 5, 5, 5, 7],
        '1' => [2, 6, 2, 2, 7],
        '2' => [7, 1, 7, 4, 7],
        '3' => [7, 1, 3, 1, 7],
        '4' => [5, 5, 7, 1, 1],
        '5' => [7, 4, 7, 1, 7],
        '6' => [7, 4, 7, 5, 7],
        '7' => [7, 1, 2, 2, 2],
        '8' => [7, 5, 7, 5, 7],
        '9' => [7, 5, 7, 1, 7],
        'A' => [2, 5, 7, 5, 5],
        'B' => [6, 5, 6, 5, 6],
        'C' => [3, 4, 4, 4, 3],
        'D' => [6, 5, 5, 5, 6],
        'E' => [7, 4, 6, 4, 7],
        'F' => [7, 4, 6, 4, 4],
        'G' => [3, 4, 5, 5, 3],
        'H' => [5, 5, 7, 5, 5],
        'I' => [7, 2, 2, 2, 7],
        'J' => [1, 1, 1, 5, 2],
        'K' => [5, 5, 6, 5, 5],
        'L' => [4, 4, 4, 4, 7],
        'M' => [5, 7, 7, 5, 5],
        'N' => [6, 5, 5, 5, 5],
        'O' => [2, 5, 5, 5, 2],
        'P' => [6, 5, 6, 4, 4],
        'Q' => [2, 5, 5, 6, 3],
        'R' => [6, 5, 6, 5, 5],
        'S' => [3, 4, 2, 1, 6],
        'T' => [7, 2, 2, 2, 2],
        'U' => [5, 5, 5, 5, 7],
        'V' => [5, 5, 5, 5, 2],
        'W' => [5, 5, 7, 7, 5],
        'X' => [5, 5, 2, 5, 5],
        'Y' => [5, 5, 2, 2, 2],
        'Z' => [7, 1, 2, 4, 7],
        '.' => [0, 0, 0, 0, 2],
        ',' => [0, 0, 0, 2, 4],
        ':' => [0, 2, 0, 2, 0],
        '%' => [5, 1, 2, 4, 5],
        '-' => [0, 0, 7, 0, 0],
        '>' => [4, 2, 1, 2, 4],
        '=' => [0, 7, 0, 7, 0],
        '(' => [1, 2, 2, 2, 1],
        ')' => [4, 2, 2, 2, 4],
        '/' => [1, 1, 2, 4, 4],
        _ => [0; 5],
    }
}

/// A "nice" tick step for a range: 1, 2 or 5 times a power of ten, about six ticks.
fn tick_step(max: f64) -> f64 {
    let rough = (max / 6.0).max(1e-3);
    let pow = 10f64.powf(rough.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * pow)
        .find(|s| *s >= rough)
        .unwrap_or(10.0 * pow)
}

fn label(v: f64, step: f64) -> String {
    if step >= 1.0 {
        format!("{v:.0}")
    } else if step >= 0.1 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

/// The empirical CDFs of `series` (name, latencies in seconds), one colour each, as a PNG.
pub fn cdf_png(title: &str, series: &[(String, Vec<f64>)]) -> Vec<u8> {
    let mut c = Canvas::new();
    let grey = [200, 200, 200];
    let black = [0, 0, 0];
    let max = series
        .iter()
        .flat_map(|(_, v)| v.iter().copied())
        .fold(0.0f64, f64::max)
        .max(0.01);
    let step = tick_step(max);
    let x_max = (max / step).ceil() * step;
    let (pw, ph) = ((W - LEFT - RIGHT) as f64, (H - TOP - BOTTOM) as f64);
    let px = |v: f64| LEFT as i64 + (v / x_max * pw).round() as i64;
    let py = |p: f64| (H - BOTTOM) as i64 - (p * ph).round() as i64;
    // Grid and ticks.
    let mut v = 0.0;
    while v <= x_max + step / 2.0 {
        c.line((px(v), py(0.0)), (px(v), py(1.0)), grey, 1);
        let l = label(v, step);
        c.text(
            px(v) - Canvas::text_width(&l, 2) / 2,
            py(0.0) + 8,
            &l,
            black,
            2,
        );
        v += step;
    }
    for i in 0..=10 {
        let p = i as f64 / 10.0;
        c.line((px(0.0), py(p)), (px(x_max), py(p)), grey, 1);
        let l = format!("{}%", i * 10);
        c.text(
            LEFT as i64 - 8 - Canvas::text_width(&l, 2),
            py(p) - 5,
            &l,
            black,
            2,
        );
    }
    c.line((px(0.0), py(0.0)), (px(x_max), py(0.0)), black, 1);
    c.line((px(0.0), py(0.0)), (px(0.0), py(1.0)), black, 1);
    let xl = "SECONDS";
    c.text(
        LEFT as i64 + pw as i64 / 2 - Canvas::text_width(xl, 2) / 2,
        (H - BOTTOM) as i64 + 32,
        xl,
        black,
        2,
    );
    c.text(LEFT as i64, 12, title, black, 3);
    // Curves (steps), with a legend at the lower right.
    for (k, (name, values)) in series.iter().enumerate() {
        let colour = COLOURS[k % COLOURS.len()];
        let mut sorted = values.clone();
        sorted.sort_by(|a, b| a.total_cmp(b));
        let n = sorted.len().max(1) as f64;
        let mut last = (px(0.0), py(0.0));
        for (i, v) in sorted.iter().enumerate() {
            let across = (px(*v), last.1);
            c.line(last, across, colour, 3);
            let up = (px(*v), py((i + 1) as f64 / n));
            c.line(across, up, colour, 3);
            last = up;
        }
        let ly = py(0.0) - 30 - 22 * (series.len() - 1 - k) as i64;
        let lx = px(x_max) - 300;
        c.line((lx, ly + 5), (lx + 30, ly + 5), colour, 3);
        c.text(lx + 40, ly, name, black, 2);
    }
    c.png()
}

#[test]
fn draws_a_valid_png() {
    let png = cdf_png(
        "TEST",
        &[("A".into(), vec![0.1, 0.2, 0.5]), ("B".into(), vec![1.5])],
    );
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
    assert_eq!(&png[12..16], b"IHDR");
    assert_eq!(&png[png.len() - 8..png.len() - 4], b"IEND");
}

#[test]
fn ticks_are_round() {
    assert_eq!(tick_step(10.0), 2.0);
    assert_eq!(tick_step(1.0), 0.2);
    assert_eq!(tick_step(128.0), 50.0);
}
