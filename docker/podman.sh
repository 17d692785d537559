# podman on the CPU machines (sourced by make_local_base.sh and test.sh): its defaults fail there three
# ways (crun's setrlimit and cgroup v1/v2 hybrid, systemd), so runc, cgroupfs and no default ulimits.
pod() {
  podman --runtime runc --cgroup-manager=cgroupfs "$@"
}
ensure_podman() {
  if ! command -v podman >/dev/null || ! command -v runc >/dev/null || ! command -v debootstrap >/dev/null; then
    if [ "$(id -u)" != 0 ]; then
      echo "docker/test.sh: podman, runc and debootstrap are not installed, and installing them needs root" >&2
      return 2
    fi
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq podman runc debootstrap >/dev/null
  fi
  if [ "$(id -u)" = 0 ] && ! grep -qs "default_ulimits" /etc/containers/containers.conf; then
    mkdir -p /etc/containers
    printf '[containers]\ndefault_ulimits = []\n' >> /etc/containers/containers.conf
  fi
}
