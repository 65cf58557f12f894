# syntax=docker/dockerfile:1
#
# The awcp-rs binaries (awcp, awcp-executor, awcp-mcp, awcp-quickstart, aip, aip-partner) in a
# small Debian image whose default command is an AWCP executor on 0.0.0.0:10200.
#
# NOT VERIFIED: this file was written where Docker had no daemon, so it has never been built
# or run. Treat it as a starting point and check it with a real `docker build`.
#
#   docker build -t awcp-rs .
#   docker run --rm -p 10200:10200 -v awcp-state:/var/lib/awcp \
#       -e AWCP_AUTH_TOKEN="$(openssl rand -hex 32)" awcp-rs
#
# The executor refuses to listen on 0.0.0.0 without a credential, so the container exits
# (status 2, saying why) unless it is given one: AWCP_AUTH_TOKEN, or AWCP_AUTH_TOKEN_FILE
# naming a file such as a Docker/Compose secret (/run/secrets/awcp_token). Every other flag
# reads an AWCP_* variable too (packaging/config/awcp-executor.env lists them), and arguments
# after the image name are passed to awcp-executor (`… awcp-rs --max-concurrent 2`).
#
# The image holds no agent: with --agent-cmd / AWCP_AGENT_CMD, build FROM this image and
# install the agent (as root, then `USER awcp` again). Without one the demo runner answers.
# Other binaries: `docker run --rm --entrypoint awcp awcp-rs --help`.
# The sshfs transport (--sshfs) is not set up: it needs sshfs in the image and
# `--device /dev/fuse --cap-add SYS_ADMIN` on `docker run`.

FROM rust:1-slim-bookworm AS build
WORKDIR /src
COPY . .
# The cache mounts keep the registry and the build between builds; the binaries are copied
# out in the same step because the target/ cache mount is not part of the image.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked -p awcp-aip-cli \
    && mkdir -p /out \
    && cd target/release \
    && cp awcp awcp-executor awcp-mcp awcp-quickstart aip aip-partner /out/

FROM debian:bookworm-slim
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --user-group --create-home --home-dir /home/awcp \
        --shell /usr/sbin/nologin awcp \
    && install -d -o awcp -g awcp -m 0700 /var/lib/awcp
COPY --from=build /out/ /usr/local/bin/
USER awcp
WORKDIR /home/awcp
# State (journal, work directories) of the executor in /var/lib/awcp/executor, of an
# `awcp daemon` run from this image in /var/lib/awcp/delegator.
ENV AWCP_HOME=/var/lib/awcp \
    AWCP_LISTEN=0.0.0.0:10200
VOLUME ["/var/lib/awcp"]
EXPOSE 10200
ENTRYPOINT ["awcp-executor"]
