//! A directory laid out as the kubelet lays out a Secret volume, and updated as it updates one:
//! the files live in a hidden timestamped directory, `..data` links to it, and each visible file
//! links to `..data/<file>`. An update writes a new hidden directory and swaps `..data` with one
//! rename, so a reader sees either every old file or every new one, never a mix.

use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

use crate::Error;

/// The link that names the current generation of the files.
const DATA: &str = "..data";

/// A Secret volume's directory, removed on drop.
pub struct SecretVolume {
    dir: PathBuf,
    generation: u32,
}

impl SecretVolume {
    /// Creates `dir` holding `files` (name and contents); the visible paths are `dir/<name>`.
    pub fn create(dir: &Path, files: &[(&str, &str)]) -> Result<Self, Error> {
        std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
        let mut volume = Self {
            dir: dir.to_path_buf(),
            generation: 0,
        };
        volume.update(files)?;
        for (name, _) in files {
            let link = dir.join(name);
            symlink(Path::new(DATA).join(name), &link).map_err(|e| Error::io(&link, e))?;
        }
        Ok(volume)
    }

    /// The visible path of file `name`.
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// Replaces every file at once, as the kubelet does when the Secret changes: a new hidden
    /// directory, `..data` swapped to it by a rename, the previous directory removed.
    pub fn update(&mut self, files: &[(&str, &str)]) -> Result<(), Error> {
        self.generation += 1;
        let hidden = format!("..{}_{}", std::process::id(), self.generation);
        let target = self.dir.join(&hidden);
        std::fs::create_dir(&target).map_err(|e| Error::io(&target, e))?;
        for (name, contents) in files {
            let path = target.join(name);
            std::fs::write(&path, contents).map_err(|e| Error::io(&path, e))?;
        }
        let previous = std::fs::read_link(self.dir.join(DATA)).ok();
        let staged = self.dir.join("..data_tmp");
        symlink(&hidden, &staged).map_err(|e| Error::io(&staged, e))?;
        let data = self.dir.join(DATA);
        std::fs::rename(&staged, &data).map_err(|e| Error::io(&data, e))?;
        if let Some(previous) = previous {
            let old = self.dir.join(previous);
            std::fs::remove_dir_all(&old).map_err(|e| Error::io(&old, e))?;
        }
        Ok(())
    }
}

impl Drop for SecretVolume {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_update_swaps_every_file_behind_the_same_paths() {
        let root = crate::TempDir::new("secret-volume");
        let dir = root.path().join("certs");
        let mut volume =
            SecretVolume::create(&dir, &[("tls.crt", "old cert"), ("tls.key", "old key")])
                .expect("created");
        let crt = volume.path("tls.crt");
        assert_eq!(std::fs::read_to_string(&crt).expect("read"), "old cert");
        volume
            .update(&[("tls.crt", "new cert"), ("tls.key", "new key")])
            .expect("updated");
        assert_eq!(std::fs::read_to_string(&crt).expect("read"), "new cert");
        assert_eq!(
            std::fs::read_to_string(volume.path("tls.key")).expect("read"),
            "new key"
        );
        assert!(
            std::fs::symlink_metadata(&crt)
                .expect("link")
                .file_type()
                .is_symlink(),
            "the visible file is a link, as in a Secret volume"
        );
        // One hidden generation left, plus `..data` and the two links.
        let entries = std::fs::read_dir(&dir).expect("list").count();
        assert_eq!(entries, 4);
    }
}
