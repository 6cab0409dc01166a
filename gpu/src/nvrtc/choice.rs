//! Which NVRTC to use with a given driver.
//!
//! A CUBIN made by CUDA N.x loads on a driver of CUDA N.0 or newer (minor
//! version compatibility) but not on an older major: a CUDA 12.x driver
//! refuses what NVRTC 13 makes. So an NVRTC is usable when its major version
//! is at most the driver's. The candidates ([`nvrtc_lib_candidates`]) are
//! tried in order: one whose file name promises a newer major
//! (`libnvrtc.so.13` on a 12.x driver) is passed over without being loaded,
//! one whose `nvrtcVersion` turns out newer is passed over after loading, and
//! every candidate passed over is recorded with the reason, so that an error
//! can name them all.
//!
//! [`nvrtc_lib_candidates`]: super::sys::nvrtc_lib_candidates

use crate::error::{Error, Result};

use super::sys::Nvrtc;

/// The CUDA `(major, minor)` of a `cuDriverGetVersion` value (12080 → 12.8).
pub fn driver_cuda(driver_version: i32) -> (i32, i32) {
    (driver_version / 1000, driver_version % 1000 / 10)
}

/// The CUDA major version an NVRTC library's file name promises:
/// `libnvrtc.so.13` → 13, `/opt/x/libnvrtc.so.12.9.86` → 12; `None` for the
/// unversioned `libnvrtc.so` or another name.
pub fn name_major(name: &str) -> Option<i32> {
    let file = name.rsplit('/').next()?;
    let rest = file.strip_prefix("libnvrtc")?;
    let (_, version) = rest.starts_with('.').then_some(rest)?.split_once(".so.")?;
    version.split('.').next()?.parse().ok()
}

/// `Err(reason)` when the images of NVRTC `version` cannot load on a driver
/// reporting `driver_version`.
pub fn fits(version: (i32, i32), driver_version: i32) -> std::result::Result<(), String> {
    let (major, minor) = driver_cuda(driver_version);
    if version.0 > major {
        Err(format!(
            "NVRTC {}.{} is newer than the driver (CUDA {major}.{minor}), which cannot \
             load its images",
            version.0, version.1
        ))
    } else {
        Ok(())
    }
}

/// One NVRTC library to try, or why it is passed over without loading it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Candidate {
    /// The path or file name given to `dlopen`.
    pub name: String,
    /// `Some(reason)` when the name alone rules it out.
    pub passed_over: Option<String>,
}

/// The candidates in the order they are tried (the given order, duplicates
/// dropped), each marked passed over when its name promises an NVRTC newer
/// than the driver (`driver_version` from `cuDriverGetVersion`).
pub fn plan(candidates: &[String], driver_version: i32) -> Vec<Candidate> {
    let mut out: Vec<Candidate> = Vec::new();
    for name in candidates {
        if out.iter().any(|c| &c.name == name) {
            continue;
        }
        let passed_over = name_major(name).and_then(|major| {
            let (driver, minor) = driver_cuda(driver_version);
            (major > driver).then(|| {
                format!(
                    "CUDA {major} by its name, newer than the driver (CUDA {driver}.{minor}), \
                     which cannot load its images"
                )
            })
        });
        out.push(Candidate {
            name: name.clone(),
            passed_over,
        });
    }
    out
}

/// The usable NVRTC libraries of a candidate list, loaded one at a time as
/// the iteration reaches them; what was passed over, and why, is kept in
/// [`Usable::notes`] (a caller adds its own, e.g. an image the driver
/// refused, with [`Usable::note`]).
pub struct Usable {
    plan: std::vec::IntoIter<Candidate>,
    driver_version: i32,
    notes: Vec<String>,
    names: Vec<String>,
}

impl Usable {
    /// The usable NVRTCs among `candidates` for a driver reporting
    /// `driver_version`.
    pub fn new(candidates: &[String], driver_version: i32) -> Usable {
        let plan = plan(candidates, driver_version);
        Usable {
            names: plan.iter().map(|c| c.name.clone()).collect(),
            plan: plan.into_iter(),
            driver_version,
            notes: Vec::new(),
        }
    }

    /// Records why a candidate was not used.
    pub fn note(&mut self, note: String) {
        self.notes.push(note);
    }

    /// Every candidate passed over so far, with the reason.
    pub fn notes(&self) -> &[String] {
        &self.notes
    }

    /// Every candidate, in order.
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// The error when no candidate served: every candidate with why it was
    /// passed over, and what to set.
    pub fn error(&self, what: &str) -> Error {
        let (major, minor) = driver_cuda(self.driver_version);
        let tried = if self.notes.is_empty() {
            "no candidates".to_string()
        } else {
            self.notes.join("; ")
        };
        Error::Unavailable(format!(
            "{what}: no usable NVRTC for a driver of CUDA {major}.{minor} (tried {}: {tried}); \
             set STREAMCOMM_NVRTC_LIB to a libnvrtc.so.N with N <= {major} \
             (e.g. from `pip install nvidia-cuda-nvrtc-cu12`)",
            self.names.join(", ")
        ))
    }
}

impl Iterator for Usable {
    type Item = &'static Nvrtc;

    fn next(&mut self) -> Option<&'static Nvrtc> {
        for candidate in self.plan.by_ref() {
            let name = &candidate.name;
            if let Some(why) = candidate.passed_over {
                self.notes.push(format!("{name}: {why}"));
                continue;
            }
            let nvrtc = match Nvrtc::open(name) {
                Ok(n) => n,
                Err(Error::Unavailable(why)) if why.contains(name.as_str()) => {
                    self.notes.push(format!("not loaded: {why}"));
                    continue;
                }
                Err(e) => {
                    self.notes.push(format!("{name}: not loaded: {e}"));
                    continue;
                }
            };
            let fit = nvrtc
                .version()
                .map_err(|e| e.to_string())
                .and_then(|v| fits(v, self.driver_version));
            match fit {
                Ok(()) => return Some(nvrtc),
                Err(why) => self.notes.push(format!("{name}: {why}")),
            }
        }
        None
    }
}

impl Nvrtc {
    /// The first of `candidates` usable with a driver reporting
    /// `driver_version` (see the module docs); for compiling ahead of time
    /// without a driver, pass the oldest driver the images are for (e.g.
    /// 12000: CUDA 12 images load on every CUDA 12 and 13 driver).
    pub fn choose(candidates: &[String], driver_version: i32) -> Result<&'static Nvrtc> {
        let mut usable = Usable::new(candidates, driver_version);
        match usable.next() {
            Some(nvrtc) => Ok(nvrtc),
            None => Err(usable.error("choosing NVRTC")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn name_majors() {
        assert_eq!(name_major("libnvrtc.so.13"), Some(13));
        assert_eq!(name_major("/opt/cuda/lib64/libnvrtc.so.12.9.86"), Some(12));
        assert_eq!(name_major("libnvrtc.alt.so.12"), Some(12));
        assert_eq!(name_major("libnvrtc.so"), None);
        assert_eq!(name_major("/x/libnvrtc-builtins.so.12.9"), None);
        assert_eq!(name_major("/x/custom.so"), None);
        assert_eq!(driver_cuda(12080), (12, 8));
        assert_eq!(driver_cuda(13000), (13, 0));
    }

    /// The candidate list × driver version → what is tried, in which order.
    #[test]
    fn newer_majors_than_the_driver_are_passed_over_in_order() {
        let default = names(&["libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"]);
        let tried = |c: &[String], driver| -> Vec<String> {
            plan(c, driver)
                .into_iter()
                .filter(|c| c.passed_over.is_none())
                .map(|c| c.name)
                .collect()
        };
        // CUDA 13 driver: 13, then 12, then the unversioned name.
        assert_eq!(tried(&default, 13000), default);
        // CUDA 12.8 driver: NVRTC 13 is passed over, with the reason.
        assert_eq!(
            tried(&default, 12080),
            names(&["libnvrtc.so.12", "libnvrtc.so"])
        );
        let p = plan(&default, 12080);
        let why = p[0].passed_over.as_deref().unwrap();
        assert!(
            why.contains("CUDA 13") && why.contains("CUDA 12.8"),
            "{why}"
        );
        // A configured path comes first, and is judged by its name too.
        let with = |path: &str| {
            let mut c = names(&[path]);
            c.extend(default.iter().cloned());
            c
        };
        assert_eq!(
            tried(&with("/opt/cuda-13/lib64/libnvrtc.so.13"), 12020),
            names(&["libnvrtc.so.12", "libnvrtc.so"])
        );
        assert_eq!(
            tried(&with("/w/nvidia/cuda_nvrtc/lib/libnvrtc.so.12"), 12080)[0],
            "/w/nvidia/cuda_nvrtc/lib/libnvrtc.so.12"
        );
        // A name that promises nothing is loaded and judged by its version.
        assert_eq!(tried(&with("/x/nvrtc.so"), 12000)[0], "/x/nvrtc.so");
        // Duplicates are tried once, where they first appear.
        assert_eq!(
            tried(&with("libnvrtc.so.12"), 13000),
            names(&["libnvrtc.so.12", "libnvrtc.so.13", "libnvrtc.so"])
        );
        // Images of an NVRTC as new as the driver, or older, load.
        assert!(fits((12, 9), 12080).is_ok());
        assert!(fits((12, 0), 13000).is_ok());
        assert!(fits((13, 0), 13000).is_ok());
        assert!(fits((13, 0), 12090).unwrap_err().contains("NVRTC 13.0"));
    }

    #[test]
    fn no_usable_nvrtc_names_every_candidate_and_the_variable() {
        let c = names(&["/nonexistent/libnvrtc.so.12", "libnvrtc.so.13"]);
        let err = match Nvrtc::choose(&c, 12080) {
            Err(e) => e,
            Ok(n) => panic!("chose {}", n.loaded_from),
        };
        crate::test_support::assert_unavailable_saying(
            &err,
            &[
                "not loaded: /nonexistent/libnvrtc.so.12: cannot open",
                "libnvrtc.so.13: CUDA 13 by its name",
                "STREAMCOMM_NVRTC_LIB",
                "CUDA 12.8",
            ],
        );
    }
}
