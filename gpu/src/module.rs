//! Loaded CUBIN modules and kernel launches.

use std::ffi::{CString, c_void};
use std::sync::Arc;

use crate::context::Device;
use crate::driver::result::check;
use crate::driver::sys::{self, CUfunction, CUmodule};
use crate::error::{Error, Result};
use crate::guard::guarded;
use crate::stream::Stream;

/// A module loaded from a CUBIN image, unloaded when the last handle goes.
#[derive(Clone)]
pub struct Module {
    inner: Arc<ModuleInner>,
}

struct ModuleInner {
    device: Device,
    raw: CUmodule,
}

// SAFETY: module handles may be used from any thread.
unsafe impl Send for ModuleInner {}
// SAFETY: as above.
unsafe impl Sync for ModuleInner {}

/// A kernel of a [`Module`] (keeps the module loaded).
#[derive(Clone)]
pub struct Function {
    module: Module,
    raw: CUfunction,
    name: String,
}

// SAFETY: function handles may be used from any thread.
unsafe impl Send for Function {}
// SAFETY: as above.
unsafe impl Sync for Function {}

impl Module {
    /// Loads a CUBIN image compiled for `device`'s architecture.
    pub fn load(device: &Device, cubin: &[u8]) -> Result<Module> {
        if cubin.len() < 4 || &cubin[..4] != b"\x7fELF" {
            return Err(Error::invalid("Module::load: not a CUBIN (ELF) image"));
        }
        guarded("cuModuleLoadData", || {
            device.bind()?;
            let mut raw: CUmodule = std::ptr::null_mut();
            // SAFETY: `cubin` is a complete ELF image that outlives the call (the
            // driver copies it).
            check("cuModuleLoadData", unsafe {
                sys::cuModuleLoadData(&mut raw, cubin.as_ptr().cast())
            })?;
            Ok(Module {
                inner: Arc::new(ModuleInner {
                    device: device.clone(),
                    raw,
                }),
            })
        })
    }

    /// Looks up the `extern "C"` kernel `name`.
    pub fn function(&self, name: &str) -> Result<Function> {
        let c_name = CString::new(name).map_err(|_| Error::invalid(format!("NUL in {name:?}")))?;
        guarded("cuModuleGetFunction", || {
            self.inner.device.bind()?;
            let mut raw: CUfunction = std::ptr::null_mut();
            // SAFETY: valid out-pointer; NUL-terminated name; live module.
            check("cuModuleGetFunction", unsafe {
                sys::cuModuleGetFunction(&mut raw, self.inner.raw, c_name.as_ptr())
            })?;
            Ok(Function {
                module: self.clone(),
                raw,
                name: name.to_string(),
            })
        })
    }
}

impl Function {
    /// The kernel's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Enqueues the kernel with one by-value argument `arg` (all kernels of this
    /// crate take a single `#[repr(C)]` struct).
    ///
    /// # Safety
    /// `A` must match the kernel's parameter layout, and every device pointer in
    /// `arg` must be valid for what the kernel does with it until it has run.
    pub unsafe fn launch<A: Copy>(
        &self,
        stream: &Stream,
        grid: u32,
        block: u32,
        arg: &A,
    ) -> Result<()> {
        if grid == 0 || block == 0 || block > 1024 {
            return Err(Error::invalid(format!(
                "{}: launch with grid {grid} block {block}",
                self.name
            )));
        }
        guarded("cuLaunchKernel", || {
            self.module.inner.device.bind()?;
            let mut params = [arg as *const A as *mut c_void];
            // SAFETY: the caller guarantees the argument layout; `params` lives
            // across the call (the driver copies the argument).
            check("cuLaunchKernel", unsafe {
                sys::cuLaunchKernel(
                    self.raw,
                    grid,
                    1,
                    1,
                    block,
                    1,
                    1,
                    0,
                    stream.as_raw(),
                    params.as_mut_ptr(),
                    std::ptr::null_mut(),
                )
            })
        })
    }
}

impl Drop for ModuleInner {
    fn drop(&mut self) {
        let _ = guarded("cuModuleUnload", || {
            self.device.bind()?;
            // SAFETY: loaded once, unloaded once, no Function left (they hold Arcs).
            check("cuModuleUnload", unsafe { sys::cuModuleUnload(self.raw) })
        });
    }
}
