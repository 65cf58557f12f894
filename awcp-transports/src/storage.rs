//! The `storage` transport's object store (WIRE.md §3.3, §11.4): where a delegator puts a
//! workspace ZIP for the executor to GET and where the executor PUTs its result, addressed by
//! SigV4 presigned URLs of any S3-compatible store (AWS, MinIO, Ceph, R2, Garage).
//!
//! Everything here is computation: [`S3Store`] names objects and signs URLs (with
//! `rusty-s3`, which is sans-IO); the drivers send the requests on their own HTTP client.
//! Packing, checking and applying the ZIPs is the archive transport's, unchanged.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use awcp_proto::DelegationId;
use rusty_s3::{Bucket, Credentials, S3Action, UrlStyle};

/// The longest a SigV4 presigned URL may live (the S3 limit: 7 days).
pub const MAX_PRESIGN: Duration = Duration::from_secs(7 * 24 * 3600);

/// Why an object store cannot be configured.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum StorageConfigError {
    /// No bucket named.
    #[error("no S3 bucket: pass --s3-bucket (or set AWCP_S3_BUCKET)")]
    NoBucket,
    /// No credentials found.
    #[error(
        "no S3 credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or name a profile \
         of ~/.aws/credentials with AWS_PROFILE"
    )]
    NoCredentials,
    /// The endpoint is not an http(s) URL with a host.
    #[error("bad S3 endpoint {0:?}: expected http(s)://host[:port]")]
    BadEndpoint(String),
}

/// S3 credentials. `Debug` never prints the secret or the session token.
#[derive(Clone, PartialEq, Eq)]
pub struct S3Credentials {
    /// Access key id (`AWS_ACCESS_KEY_ID`).
    pub access_key: String,
    /// Secret access key (`AWS_SECRET_ACCESS_KEY`).
    pub secret_key: String,
    /// Session token (`AWS_SESSION_TOKEN`), for temporary credentials.
    pub session_token: Option<String>,
}

impl core::fmt::Debug for S3Credentials {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("S3Credentials")
            .field("access_key", &self.access_key)
            .field("secret_key", &"<redacted>")
            .field(
                "session_token",
                &self.session_token.as_ref().map(|_| "<redacted>"),
            )
            .finish()
    }
}

/// Where and how to reach the bucket.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct S3Config {
    /// `https://s3.eu-west-1.amazonaws.com`, `http://127.0.0.1:9000`, …
    pub endpoint: String,
    /// The bucket.
    pub bucket: String,
    /// The region the signatures name (`us-east-1` where the store does not care).
    pub region: String,
    /// Path-style addressing (`endpoint/bucket/key`) instead of virtual-host style
    /// (`bucket.endpoint/key`). MinIO, Ceph and Garage usually want path style.
    pub path_style: bool,
    /// Prepended to every key (`team-a/`); empty for none.
    pub prefix: String,
    /// The delegator's credentials (never sent to an executor: it gets presigned URLs).
    pub credentials: S3Credentials,
    /// Above this size an upload is a multipart upload of parts this large (S3's minimum
    /// part is 5 MiB).
    pub part_size: u64,
}

/// The default multipart part size (`AWCP_S3_PART_MIB`, 64).
pub const DEFAULT_PART_SIZE: u64 = 64 << 20;

impl S3Config {
    /// A configuration from the variables the AWS tools read, looked up with `var`:
    /// `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`, or else the
    /// profile `AWS_PROFILE` (default `default`) of `AWS_SHARED_CREDENTIALS_FILE` (default
    /// `~/.aws/credentials`, `home` being `~`); the region from `AWS_REGION`,
    /// `AWS_DEFAULT_REGION` or the profile of `AWS_CONFIG_FILE` (default `~/.aws/config`),
    /// else `us-east-1`; the endpoint from `endpoint`, `AWS_ENDPOINT_URL_S3` or
    /// `AWS_ENDPOINT_URL`, else AWS's for the region. A custom endpoint uses path-style
    /// addressing unless `AWCP_S3_VIRTUAL_HOST=1`; AWS's own uses virtual-host style.
    pub fn from_env(
        bucket: Option<String>,
        prefix: Option<String>,
        endpoint: Option<String>,
        var: &dyn Fn(&str) -> Option<String>,
        home: Option<&Path>,
    ) -> Result<S3Config, StorageConfigError> {
        let var = |k: &str| var(k).filter(|v| !v.is_empty());
        let bucket = bucket
            .or_else(|| var("AWCP_S3_BUCKET"))
            .ok_or(StorageConfigError::NoBucket)?;
        let profile = var("AWS_PROFILE").unwrap_or_else(|| "default".into());
        let file = |env: &str, default: &str| -> Option<PathBuf> {
            var(env)
                .map(PathBuf::from)
                .or_else(|| home.map(|h| h.join(".aws").join(default)))
        };
        let credentials = match (var("AWS_ACCESS_KEY_ID"), var("AWS_SECRET_ACCESS_KEY")) {
            (Some(access_key), Some(secret_key)) => S3Credentials {
                access_key,
                secret_key,
                session_token: var("AWS_SESSION_TOKEN"),
            },
            _ => {
                let section = file("AWS_SHARED_CREDENTIALS_FILE", "credentials")
                    .and_then(|p| std::fs::read_to_string(p).ok())
                    .and_then(|text| ini_section(&text, &profile))
                    .ok_or(StorageConfigError::NoCredentials)?;
                S3Credentials {
                    access_key: section
                        .get("aws_access_key_id")
                        .cloned()
                        .ok_or(StorageConfigError::NoCredentials)?,
                    secret_key: section
                        .get("aws_secret_access_key")
                        .cloned()
                        .ok_or(StorageConfigError::NoCredentials)?,
                    session_token: section.get("aws_session_token").cloned(),
                }
            }
        };
        let config_profile = || {
            let name = if profile == "default" {
                "default".to_owned()
            } else {
                format!("profile {profile}")
            };
            file("AWS_CONFIG_FILE", "config")
                .and_then(|p| std::fs::read_to_string(p).ok())
                .and_then(|text| ini_section(&text, &name))
        };
        let region = var("AWS_REGION")
            .or_else(|| var("AWS_DEFAULT_REGION"))
            .or_else(|| config_profile().and_then(|s| s.get("region").cloned()))
            .unwrap_or_else(|| "us-east-1".into());
        let custom = endpoint
            .or_else(|| var("AWS_ENDPOINT_URL_S3"))
            .or_else(|| var("AWS_ENDPOINT_URL"));
        let path_style = custom.is_some() && var("AWCP_S3_VIRTUAL_HOST").as_deref() != Some("1");
        let endpoint = custom.unwrap_or_else(|| format!("https://s3.{region}.amazonaws.com"));
        Ok(S3Config {
            endpoint,
            bucket,
            region,
            path_style,
            prefix: prefix.or_else(|| var("AWCP_S3_PREFIX")).unwrap_or_default(),
            credentials,
            part_size: var("AWCP_S3_PART_MIB")
                .and_then(|m| m.parse::<u64>().ok())
                .map_or(DEFAULT_PART_SIZE, |m| m.clamp(5, 5 * 1024) << 20),
        })
    }
}

/// The `key = value` lines of section `[name]` of an INI file (the AWS tools' format).
fn ini_section(text: &str, name: &str) -> Option<BTreeMap<String, String>> {
    let mut found = None;
    let mut current: Option<BTreeMap<String, String>> = None;
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some(section) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            if let Some(done) = current.take() {
                found = Some(done);
            }
            if section.trim() == name {
                current = Some(BTreeMap::new());
            }
            continue;
        }
        if let (Some(map), Some((k, v))) = (current.as_mut(), line.split_once('=')) {
            map.insert(k.trim().to_ascii_lowercase(), v.trim().to_owned());
        }
    }
    current.or(found)
}

/// A presigned request: its URL and the headers it must be sent with.
#[derive(Clone, PartialEq, Eq)]
pub struct Presigned {
    /// The URL (a bearer capability until it expires: never log it whole, see
    /// [`redact_url`]).
    pub url: String,
}

impl core::fmt::Debug for Presigned {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Presigned")
            .field("url", &redact_url(&self.url))
            .finish()
    }
}

/// `url` without its query (where a presigned URL's signature is): for logs and errors.
pub fn redact_url(url: &str) -> String {
    match url.split_once('?') {
        Some((base, _)) => format!("{base}?…"),
        None => url.to_owned(),
    }
}

/// `message` with `url`'s query (a presigned URL's signature) replaced by `…`: for errors that
/// quote the URL they were about.
pub fn redact_in(message: &str, url: &str) -> String {
    match url.split_once('?') {
        Some((_, query)) if !query.is_empty() => message.replace(query, "…"),
        _ => message.to_owned(),
    }
}

/// An S3-compatible bucket the delegator lends workspaces through: object names and
/// presigned URLs (no I/O).
#[derive(Clone)]
pub struct S3Store {
    bucket: Bucket,
    credentials: Credentials,
    prefix: String,
    endpoint: String,
    part_size: u64,
}

impl core::fmt::Debug for S3Store {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("S3Store")
            .field("endpoint", &self.endpoint)
            .field("bucket", &self.bucket.name())
            .field("prefix", &self.prefix)
            .finish()
    }
}

impl S3Store {
    /// A store for `config`.
    pub fn new(config: &S3Config) -> Result<S3Store, StorageConfigError> {
        let bad = || StorageConfigError::BadEndpoint(config.endpoint.clone());
        let endpoint: url::Url = config.endpoint.parse().map_err(|_| bad())?;
        let style = if config.path_style {
            UrlStyle::Path
        } else {
            UrlStyle::VirtualHost
        };
        let bucket = Bucket::new(
            endpoint,
            style,
            config.bucket.clone(),
            config.region.clone(),
        )
        .map_err(|_| bad())?;
        let c = &config.credentials;
        let credentials = match &c.session_token {
            Some(t) => Credentials::new_with_token(&c.access_key, &c.secret_key, t),
            None => Credentials::new(&c.access_key, &c.secret_key),
        };
        Ok(S3Store {
            bucket,
            credentials,
            prefix: config.prefix.clone(),
            endpoint: config.endpoint.clone(),
            part_size: config.part_size,
        })
    }

    /// Above this size an upload is multipart, in parts this large.
    pub fn part_size(&self) -> u64 {
        self.part_size
    }

    /// The bucket's name.
    pub fn bucket(&self) -> &str {
        self.bucket.name()
    }

    /// The key of `id`'s workspace ZIP: `<prefix>workspaces/<id>.zip` (the reference's).
    pub fn workspace_key(&self, id: &DelegationId) -> String {
        format!("{}workspaces/{id}.zip", self.prefix)
    }

    /// The key of `id`'s result ZIP: `<prefix>workspaces/<id>-result.zip` (the reference's).
    pub fn result_key(&self, id: &DelegationId) -> String {
        format!("{}workspaces/{id}-result.zip", self.prefix)
    }

    /// A presigned GET of `key`, valid for `ttl` (capped at [`MAX_PRESIGN`], at least 1 s).
    pub fn get(&self, key: &str, ttl: Duration) -> Presigned {
        let a = self.bucket.get_object(Some(&self.credentials), key);
        Presigned {
            url: a.sign(clamp(ttl)).to_string(),
        }
    }

    /// A presigned PUT of `key`, valid for `ttl` (capped as [`S3Store::get`]'s).
    pub fn put(&self, key: &str, ttl: Duration) -> Presigned {
        let a = self.bucket.put_object(Some(&self.credentials), key);
        Presigned {
            url: a.sign(clamp(ttl)).to_string(),
        }
    }

    /// A presigned DELETE of `key`, valid for `ttl`.
    pub fn delete(&self, key: &str, ttl: Duration) -> Presigned {
        let a = self.bucket.delete_object(Some(&self.credentials), key);
        Presigned {
            url: a.sign(clamp(ttl)).to_string(),
        }
    }

    /// A presigned `POST ?uploads` starting a multipart upload of `key`; its answer's upload
    /// id is read with [`S3Store::upload_id`].
    pub fn create_multipart(&self, key: &str, ttl: Duration) -> Presigned {
        let a = self
            .bucket
            .create_multipart_upload(Some(&self.credentials), key);
        Presigned {
            url: a.sign(clamp(ttl)).to_string(),
        }
    }

    /// The upload id in a `CreateMultipartUpload` answer.
    pub fn upload_id(answer: &str) -> Option<String> {
        rusty_s3::actions::CreateMultipartUpload::parse_response(answer)
            .ok()
            .map(|r| r.upload_id().to_owned())
    }

    /// A presigned PUT of part `part` (from 1) of multipart upload `upload_id` of `key`.
    pub fn upload_part(&self, key: &str, part: u16, upload_id: &str, ttl: Duration) -> Presigned {
        let a = self
            .bucket
            .upload_part(Some(&self.credentials), key, part, upload_id);
        Presigned {
            url: a.sign(clamp(ttl)).to_string(),
        }
    }

    /// A presigned `POST ?uploadId=` completing upload `upload_id` of `key` with the parts'
    /// ETags (in part order), and the XML body to send with it.
    pub fn complete_multipart(
        &self,
        key: &str,
        upload_id: &str,
        etags: &[String],
        ttl: Duration,
    ) -> (Presigned, String) {
        let a = self.bucket.complete_multipart_upload(
            Some(&self.credentials),
            key,
            upload_id,
            etags.iter().map(String::as_str),
        );
        let url = a.sign(clamp(ttl)).to_string();
        (Presigned { url }, a.body())
    }

    /// A presigned DELETE aborting upload `upload_id` of `key`.
    pub fn abort_multipart(&self, key: &str, upload_id: &str, ttl: Duration) -> Presigned {
        let a = self
            .bucket
            .abort_multipart_upload(Some(&self.credentials), key, upload_id);
        Presigned {
            url: a.sign(clamp(ttl)).to_string(),
        }
    }
}

fn clamp(ttl: Duration) -> Duration {
    ttl.clamp(Duration::from_secs(1), MAX_PRESIGN)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let m: BTreeMap<String, String> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        move |k| m.get(k).cloned()
    }

    #[test]
    fn credentials_come_from_the_environment_or_a_profile() {
        let e = env(&[
            ("AWS_ACCESS_KEY_ID", "AKIA1"),
            ("AWS_SECRET_ACCESS_KEY", "s3cr3t"),
            ("AWS_REGION", "eu-west-3"),
        ]);
        let c = S3Config::from_env(Some("b".into()), None, None, &e, None).unwrap();
        assert_eq!(c.credentials.access_key, "AKIA1");
        assert_eq!(c.region, "eu-west-3");
        assert_eq!(c.endpoint, "https://s3.eu-west-3.amazonaws.com");
        assert!(!c.path_style);
        assert!(!format!("{:?}", c.credentials).contains("s3cr3t"));

        let home = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(home.path().join(".aws")).unwrap();
        std::fs::write(
            home.path().join(".aws/credentials"),
            "[default]\naws_access_key_id = A\naws_secret_access_key = B\n\n[ci]\n\
             aws_access_key_id=CI\naws_secret_access_key=CS\naws_session_token=T\n",
        )
        .unwrap();
        std::fs::write(
            home.path().join(".aws/config"),
            "[profile ci]\nregion = ap-south-1\n",
        )
        .unwrap();
        let e = env(&[
            ("AWS_PROFILE", "ci"),
            ("AWS_ENDPOINT_URL", "http://127.0.0.1:9000"),
        ]);
        let c = S3Config::from_env(
            Some("b".into()),
            Some("p/".into()),
            None,
            &e,
            Some(home.path()),
        )
        .unwrap();
        assert_eq!(c.credentials.access_key, "CI");
        assert_eq!(c.credentials.session_token.as_deref(), Some("T"));
        assert_eq!(c.region, "ap-south-1");
        assert!(c.path_style);
        assert_eq!(
            S3Config::from_env(None, None, None, &e, Some(home.path())),
            Err(StorageConfigError::NoBucket)
        );
        assert_eq!(
            S3Config::from_env(Some("b".into()), None, None, &env(&[]), None),
            Err(StorageConfigError::NoCredentials)
        );
    }

    #[test]
    fn keys_are_the_references_and_urls_are_signed_for_their_method() {
        let e = env(&[
            ("AWS_ACCESS_KEY_ID", "AKIA1"),
            ("AWS_SECRET_ACCESS_KEY", "s3cr3t"),
        ]);
        let c = S3Config::from_env(
            Some("bk".into()),
            Some("t/".into()),
            Some("http://127.0.0.1:9000".into()),
            &e,
            None,
        )
        .unwrap();
        let s = S3Store::new(&c).unwrap();
        let id = DelegationId::new("dlg_abc").unwrap();
        assert_eq!(s.workspace_key(&id), "t/workspaces/dlg_abc.zip");
        assert_eq!(s.result_key(&id), "t/workspaces/dlg_abc-result.zip");
        let get = s.get(&s.workspace_key(&id), Duration::from_secs(60));
        assert!(get
            .url
            .starts_with("http://127.0.0.1:9000/bk/t/workspaces/dlg_abc.zip?"));
        assert!(get.url.contains("X-Amz-Signature="), "{}", get.url);
        assert!(get.url.contains("X-Amz-Expires=60"), "{}", get.url);
        assert_ne!(get, s.put(&s.workspace_key(&id), Duration::from_secs(60)));
        assert!(!get.url.contains("s3cr3t"));
        assert!(!format!("{get:?}").contains("X-Amz-Signature"));
        // Capped at the store's limit.
        let long = s.get("k", Duration::from_secs(30 * 24 * 3600));
        assert!(long.url.contains("X-Amz-Expires=604800"), "{}", long.url);
    }
}
