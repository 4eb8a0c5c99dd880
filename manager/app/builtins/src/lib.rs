//! C library symbols for Hermit applications: math.h over the `libm` crate, and memcpy & co. from compiler-builtins.
//!
//! Rust's std for `*-unknown-hermit` calls these as C functions and expects
//! the kernel library to define them (Hermit has no libc). The xtask renames
//! every other symbol of this archive so nothing else leaks into the link.
#![no_std]

/// Defines `extern "C"` functions that forward to `libm` with the same name
/// and signature.
macro_rules! forward {
    ($(fn $name:ident($($arg:ident: $ty:ty),+) -> $ret:ty;)+) => {
        $(
            #[no_mangle]
            pub extern "C" fn $name($($arg: $ty),+) -> $ret {
                libm::$name($($arg),+)
            }
        )+
    };
}

forward! {
    fn acos(x: f64) -> f64; fn acosf(x: f32) -> f32;
    fn acosh(x: f64) -> f64; fn acoshf(x: f32) -> f32;
    fn asin(x: f64) -> f64; fn asinf(x: f32) -> f32;
    fn asinh(x: f64) -> f64; fn asinhf(x: f32) -> f32;
    fn atan(x: f64) -> f64; fn atanf(x: f32) -> f32;
    fn atan2(y: f64, x: f64) -> f64; fn atan2f(y: f32, x: f32) -> f32;
    fn atanh(x: f64) -> f64; fn atanhf(x: f32) -> f32;
    fn cbrt(x: f64) -> f64; fn cbrtf(x: f32) -> f32;
    fn ceil(x: f64) -> f64; fn ceilf(x: f32) -> f32;
    fn copysign(x: f64, y: f64) -> f64; fn copysignf(x: f32, y: f32) -> f32;
    fn cos(x: f64) -> f64; fn cosf(x: f32) -> f32;
    fn cosh(x: f64) -> f64; fn coshf(x: f32) -> f32;
    fn erf(x: f64) -> f64; fn erff(x: f32) -> f32;
    fn erfc(x: f64) -> f64; fn erfcf(x: f32) -> f32;
    fn exp(x: f64) -> f64; fn expf(x: f32) -> f32;
    fn exp10(x: f64) -> f64; fn exp10f(x: f32) -> f32;
    fn exp2(x: f64) -> f64; fn exp2f(x: f32) -> f32;
    fn expm1(x: f64) -> f64; fn expm1f(x: f32) -> f32;
    fn fabs(x: f64) -> f64; fn fabsf(x: f32) -> f32;
    fn fdim(x: f64, y: f64) -> f64; fn fdimf(x: f32, y: f32) -> f32;
    fn floor(x: f64) -> f64; fn floorf(x: f32) -> f32;
    fn fma(x: f64, y: f64, z: f64) -> f64; fn fmaf(x: f32, y: f32, z: f32) -> f32;
    fn fmax(x: f64, y: f64) -> f64; fn fmaxf(x: f32, y: f32) -> f32;
    fn fmin(x: f64, y: f64) -> f64; fn fminf(x: f32, y: f32) -> f32;
    fn fmod(x: f64, y: f64) -> f64; fn fmodf(x: f32, y: f32) -> f32;
    fn hypot(x: f64, y: f64) -> f64; fn hypotf(x: f32, y: f32) -> f32;
    fn ilogb(x: f64) -> i32; fn ilogbf(x: f32) -> i32;
    fn j0(x: f64) -> f64; fn j0f(x: f32) -> f32;
    fn j1(x: f64) -> f64; fn j1f(x: f32) -> f32;
    fn jn(n: i32, x: f64) -> f64; fn jnf(n: i32, x: f32) -> f32;
    fn ldexp(x: f64, n: i32) -> f64; fn ldexpf(x: f32, n: i32) -> f32;
    fn lgamma(x: f64) -> f64; fn lgammaf(x: f32) -> f32;
    fn log(x: f64) -> f64; fn logf(x: f32) -> f32;
    fn log10(x: f64) -> f64; fn log10f(x: f32) -> f32;
    fn log1p(x: f64) -> f64; fn log1pf(x: f32) -> f32;
    fn log2(x: f64) -> f64; fn log2f(x: f32) -> f32;
    fn nextafter(x: f64, y: f64) -> f64; fn nextafterf(x: f32, y: f32) -> f32;
    fn pow(x: f64, y: f64) -> f64; fn powf(x: f32, y: f32) -> f32;
    fn remainder(x: f64, y: f64) -> f64; fn remainderf(x: f32, y: f32) -> f32;
    fn rint(x: f64) -> f64; fn rintf(x: f32) -> f32;
    fn round(x: f64) -> f64; fn roundf(x: f32) -> f32;
    fn scalbn(x: f64, n: i32) -> f64; fn scalbnf(x: f32, n: i32) -> f32;
    fn sin(x: f64) -> f64; fn sinf(x: f32) -> f32;
    fn sinh(x: f64) -> f64; fn sinhf(x: f32) -> f32;
    fn sqrt(x: f64) -> f64; fn sqrtf(x: f32) -> f32;
    fn tan(x: f64) -> f64; fn tanf(x: f32) -> f32;
    fn tanh(x: f64) -> f64; fn tanhf(x: f32) -> f32;
    fn tgamma(x: f64) -> f64; fn tgammaf(x: f32) -> f32;
    fn trunc(x: f64) -> f64; fn truncf(x: f32) -> f32;
    fn y0(x: f64) -> f64; fn y0f(x: f32) -> f32;
    fn y1(x: f64) -> f64; fn y1f(x: f32) -> f32;
    fn yn(n: i32, x: f64) -> f64; fn ynf(n: i32, x: f32) -> f32;
}

/// `nan("")`: the quiet NaN (the payload string is ignored).
#[no_mangle]
pub extern "C" fn nan(_tag: *const core::ffi::c_char) -> f64 {
    f64::NAN
}

/// `nanf("")`: the quiet NaN (the payload string is ignored).
#[no_mangle]
pub extern "C" fn nanf(_tag: *const core::ffi::c_char) -> f32 {
    f32::NAN
}

/// Writes `value` through a C out-pointer the caller may pass as null.
fn store<T>(out: *mut T, value: T) {
    // SAFETY: C callers pass either null or a valid, aligned pointer to T.
    if let Some(out) = unsafe { out.as_mut() } {
        *out = value;
    }
}

/// Defines the C functions that return a second result through a pointer
/// (`libm` returns it as the tuple's second element).
macro_rules! forward_out {
    ($(fn $name:ident($($arg:ident: $ty:ty),+; $out:ident: $outty:ty) -> $ret:ty;)+) => {
        $(
            #[no_mangle]
            pub extern "C" fn $name($($arg: $ty),+, $out: *mut $outty) -> $ret {
                let (value, second) = libm::$name($($arg),+);
                store($out, second);
                value
            }
        )+
    };
}

forward_out! {
    fn frexp(x: f64; exp: i32) -> f64; fn frexpf(x: f32; exp: i32) -> f32;
    fn lgamma_r(x: f64; sign: i32) -> f64; fn lgammaf_r(x: f32; sign: i32) -> f32;
    fn remquo(x: f64, y: f64; quo: i32) -> f64; fn remquof(x: f32, y: f32; quo: i32) -> f32;
}

/// `modf`: the fractional part, and the integral part through `int_part`.
#[no_mangle]
pub extern "C" fn modf(x: f64, int_part: *mut f64) -> f64 {
    let (fraction, integral) = libm::modf(x);
    store(int_part, integral);
    fraction
}

/// `modff`: the fractional part, and the integral part through `int_part`.
#[no_mangle]
pub extern "C" fn modff(x: f32, int_part: *mut f32) -> f32 {
    let (fraction, integral) = libm::modff(x);
    store(int_part, integral);
    fraction
}

/// `sincos`: both results through pointers.
#[no_mangle]
pub extern "C" fn sincos(x: f64, sin: *mut f64, cos: *mut f64) {
    let (s, c) = libm::sincos(x);
    store(sin, s);
    store(cos, c);
}

/// `sincosf`: both results through pointers.
#[no_mangle]
pub extern "C" fn sincosf(x: f32, sin: *mut f32, cos: *mut f32) {
    let (s, c) = libm::sincosf(x);
    store(sin, s);
    store(cos, c);
}

#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    // Nothing here panics (libm is panic-free); a loop is the only option
    // in a no_std library that may not pull in the kernel's handler.
    loop {
        core::hint::spin_loop();
    }
}
