//! The Kubernetes upgrade between `pre` and `post`: Harvester v1.7 → v1.8 on v1.34 → v1.35 by
//! default, v1.6 → v1.7 on v1.33 → v1.34 with `UPGRADE_FROM=v1.33.13 UPGRADE_TO=v1.34.4`.

use crate::support::upgrade::harvester_upgrade;

/// `pre` on the old API server, the new API server on the same etcd, the next chart applied by
/// Helm 4, `post`: both objects restored exactly, Helm keeps its fields, a second `post` is a
/// no-op.
#[tokio::test]
async fn an_api_server_upgrade_between_pre_and_post_loses_nothing() {
    harvester_upgrade(None).await;
}
