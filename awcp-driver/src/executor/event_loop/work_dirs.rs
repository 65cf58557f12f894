//! Executing the engine's work-directory outputs: allocate, set up the transport, release,
//! remove an empty directory.

use super::*;

impl<R: Runtime> Loop<R> {
    /// [`ExecutorOutput::AllocateWorkDir`].
    pub(super) fn allocate_work_dir(
        &mut self,
        id: DelegationId,
        work_dir: String,
        transport: TransportKind,
    ) {
        let t = self.transport_for(&transport);
        self.kinds.insert(id.clone(), transport);
        let feed = self.feed();
        let rt = self.rt.clone();
        self.spawn_in(crate::delegation_span(&id), async move {
            let result = blocking(&rt, move || allocate(&*t, Path::new(&work_dir))).await;
            feed(ExecutorInput::WorkDirAllocated { id, result });
        });
    }

    /// [`ExecutorOutput::SetupTransport`].
    pub(super) fn setup_transport(
        &mut self,
        id: DelegationId,
        work_dir: String,
        handle: Box<awcp_proto::TransportHandle>,
        access_mode: awcp_proto::AccessMode,
        resources: Vec<awcp_proto::Resource>,
    ) {
        if let awcp_proto::TransportHandle::Archive(a) = &*handle {
            if let Some(f) = &a.data.local_file {
                self.unclaimed_archives.retain(|u| u != f);
            }
        }
        if let (awcp_proto::TransportHandle::Git(_), Some(git)) = (&*handle, self.git.clone()) {
            let feed = self.feed();
            let rt = self.rt.clone();
            self.spawn_in(crate::delegation_span(&id), async move {
                let names: Vec<_> = resources.into_iter().map(|r| r.name).collect();
                let did = id.clone();
                let result = blocking(&rt, move || {
                    git.setup_git(&did, std::path::Path::new(&work_dir), &handle, &names)
                        .map(layout_of)
                        .map_err(|e| awcp_proto::SetupFailure::Transport(e.to_error_info()))
                })
                .await;
                feed(ExecutorInput::SetupCompleted { id, result });
            });
            return;
        }
        let t = self.transport_for(&handle.kind());
        let feed = self.feed();
        let cancel = CancelFlag::new();
        self.cancels.insert(id.clone(), cancel.clone());
        let downloads = self.scratch.join("downloads");
        let timeout = self.engine.config().archive_download_timeout;
        let http = self.http.clone();
        self.spawn_in(crate::delegation_span(&id), async move {
            let result = setup(
                &http,
                t,
                &id,
                work_dir,
                *handle,
                access_mode,
                resources,
                downloads,
                timeout,
                cancel,
            )
            .await;
            feed(ExecutorInput::SetupCompleted { id, result });
        });
    }

    /// [`ExecutorOutput::Release`].
    pub(super) fn release(&mut self, id: DelegationId, work_dir: String, transport: TransportKind) {
        self.cancels.remove(&id);
        self.kinds.remove(&id);
        let t = self.transport_for(&transport);
        let feed = self.feed();
        let rt = self.rt.clone();
        self.spawn_in(crate::delegation_span(&id), async move {
            let result = blocking(&rt, move || release_work_dir(&*t, &transport, &work_dir)).await;
            feed(ExecutorInput::Released { id, result });
        });
    }

    /// [`ExecutorOutput::RemoveEmptyWorkDir`].
    pub(super) fn remove_empty_work_dir(&mut self, id: DelegationId, work_dir: String) {
        // Never anything inside: it may be someone else's directory.
        let _ = std::fs::remove_dir(&work_dir);
        let _ = self
            .tx
            .unbounded_send(Cmd::Input(ExecutorInput::Released { id, result: Ok(()) }));
    }
}
