package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

const kustomizeDir = "../../deploy/kubernetes"

// k8sContainer is the part of a container the overlay's checks read.
type k8sContainer struct {
	Name    string   `yaml:"name"`
	Image   string   `yaml:"image"`
	Args    []string `yaml:"args"`
	EnvFrom []struct {
		SecretRef struct {
			Name string `yaml:"name"`
		} `yaml:"secretRef"`
	} `yaml:"envFrom"`
	Ports []struct {
		Name          string `yaml:"name"`
		ContainerPort int    `yaml:"containerPort"`
	} `yaml:"ports"`
	SecurityContext struct {
		RunAsNonRoot             *bool `yaml:"runAsNonRoot"`
		AllowPrivilegeEscalation *bool `yaml:"allowPrivilegeEscalation"`
		ReadOnlyRootFilesystem   *bool `yaml:"readOnlyRootFilesystem"`
		Capabilities             struct {
			Drop []string `yaml:"drop"`
		} `yaml:"capabilities"`
		SeccompProfile struct {
			Type string `yaml:"type"`
		} `yaml:"seccompProfile"`
	} `yaml:"securityContext"`
	VolumeMounts []struct {
		Name      string `yaml:"name"`
		MountPath string `yaml:"mountPath"`
		SubPath   string `yaml:"subPath"`
	} `yaml:"volumeMounts"`
}

// k8sObject is the part of a manifest the checks read.
type k8sObject struct {
	Kind     string `yaml:"kind"`
	Metadata struct {
		Name string `yaml:"name"`
	} `yaml:"metadata"`
	Spec struct {
		Template struct {
			Metadata struct {
				Annotations map[string]string `yaml:"annotations"`
			} `yaml:"metadata"`
			Spec struct {
				InitContainers []k8sContainer `yaml:"initContainers"`
				Containers     []k8sContainer `yaml:"containers"`
			} `yaml:"spec"`
		} `yaml:"template"`
		Ports []struct {
			Port       int    `yaml:"port"`
			TargetPort string `yaml:"targetPort"`
		} `yaml:"ports"`
	} `yaml:"spec"`
}

func readObjects(t *testing.T, raw []byte) []k8sObject {
	t.Helper()
	dec := yaml.NewDecoder(strings.NewReader(string(raw)))
	var out []k8sObject
	for {
		var o k8sObject
		if err := dec.Decode(&o); err != nil {
			break
		}
		if o.Kind != "" {
			out = append(out, o)
		}
	}
	return out
}

func readFileObjects(t *testing.T, name string) []k8sObject {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(kustomizeDir, name))
	if err != nil {
		t.Fatal(err)
	}
	return readObjects(t, raw)
}

// restricted checks a container's securityContext against the "restricted"
// Pod Security Standard.
func restricted(t *testing.T, c k8sContainer) {
	t.Helper()
	sc := c.SecurityContext
	if sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
		sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem || !slices.Equal(sc.Capabilities.Drop, []string{"ALL"}) ||
		sc.SeccompProfile.Type != "RuntimeDefault" {
		t.Errorf("container %s: securityContext %+v; want runAsNonRoot, no privilege escalation, read-only root, drop ALL, seccomp RuntimeDefault", c.Name, sc)
	}
}

func port(c k8sContainer, name string) int {
	for _, p := range c.Ports {
		if p.Name == name {
			return p.ContainerPort
		}
	}
	return 0
}

// TestDeployKustomize: deploy/kubernetes is a kustomize overlay that patches
// an existing Core instead of replacing it — the sidecar container and a
// check-config init container added to Core's Deployment under the
// restricted Pod Security Standard, Core's Service re-pointed at the
// sidecar, the PodMonitor only in an optional component, no Secret with
// placeholders — and its configuration is valid. With kubectl on PATH the
// overlay is built, with and without the component.
func TestDeployKustomize(t *testing.T) {
	var kz struct {
		Resources          []string                `yaml:"resources"`
		Components         []string                `yaml:"components"`
		Patches            []struct{ Path string } `yaml:"patches"`
		ConfigMapGenerator []struct {
			Name  string   `yaml:"name"`
			Files []string `yaml:"files"`
		} `yaml:"configMapGenerator"`
	}
	raw, err := os.ReadFile(filepath.Join(kustomizeDir, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(raw, &kz); err != nil {
		t.Fatal(err)
	}
	if len(kz.Components) != 0 {
		t.Errorf("components %v are on by default; want the PodMonitor optional", kz.Components)
	}
	var patches []string
	for _, p := range kz.Patches {
		patches = append(patches, p.Path)
	}
	if !slices.Equal(patches, []string{"core-deployment-patch.yaml", "core-service-patch.yaml"}) {
		t.Errorf("patches %v; want the Core Deployment and Service patches", patches)
	}
	if len(kz.ConfigMapGenerator) != 1 || kz.ConfigMapGenerator[0].Name != "knowledge-sidecar" || !slices.Equal(kz.ConfigMapGenerator[0].Files, []string{"sidecar.yaml"}) {
		t.Errorf("configMapGenerator %+v; want knowledge-sidecar from sidecar.yaml", kz.ConfigMapGenerator)
	}
	for _, r := range kz.Resources {
		if !strings.HasSuffix(r, ".yaml") {
			continue // the Core stand-in directory
		}
		for _, o := range readFileObjects(t, r) {
			if o.Kind == "PodMonitor" || o.Kind == "Secret" || (o.Metadata.Name == "bailinghub-core" && (o.Kind == "Deployment" || o.Kind == "Service")) {
				t.Errorf("%s defines %s %s; want it only in the optional component, created by the operator, or patched", r, o.Kind, o.Metadata.Name)
			}
		}
	}
	pm := readFileObjects(t, "podmonitor/podmonitor.yaml")
	if len(pm) != 1 || pm[0].Kind != "PodMonitor" {
		t.Errorf("podmonitor component: got %+v; want one PodMonitor", pm)
	}

	dep := readFileObjects(t, "core-deployment-patch.yaml")
	if len(dep) != 1 || dep[0].Kind != "Deployment" || dep[0].Metadata.Name != "bailinghub-core" {
		t.Fatalf("core-deployment-patch.yaml: got %+v; want a patch of Deployment bailinghub-core", dep)
	}
	pod := dep[0].Spec.Template.Spec
	if len(pod.Containers) != 1 || pod.Containers[0].Name != "knowledge-sidecar" {
		t.Fatalf("the patch's containers: %+v; want only knowledge-sidecar (Core's own is left as it is)", pod.Containers)
	}
	sidecarC := pod.Containers[0]
	if len(pod.InitContainers) != 1 {
		t.Fatalf("init containers: %+v; want one running check-config", pod.InitContainers)
	}
	initC := pod.InitContainers[0]
	const cfgFile = "/etc/knowledge-sidecar/sidecar.yaml"
	if !slices.Equal(initC.Args, []string{"check-config", "--config", cfgFile}) || initC.Image != sidecarC.Image ||
		len(initC.EnvFrom) != 1 || initC.EnvFrom[0].SecretRef.Name != "knowledge-sidecar" {
		t.Errorf("init container: %+v; want check-config --config %s with the sidecar's image and Secret", initC, cfgFile)
	}
	if !slices.Equal(sidecarC.Args, []string{"serve", "--config", cfgFile}) {
		t.Errorf("sidecar args %v; want serve --config %s", sidecarC.Args, cfgFile)
	}
	for _, c := range []k8sContainer{initC, sidecarC} {
		restricted(t, c)
		if len(c.VolumeMounts) != 1 || c.VolumeMounts[0].MountPath != filepath.Dir(cfgFile) || c.VolumeMounts[0].SubPath != "" {
			t.Errorf("container %s mounts %+v; want the whole config volume at %s", c.Name, c.VolumeMounts, filepath.Dir(cfgFile))
		}
	}
	adminPort, httpPort := port(sidecarC, "ks-admin"), port(sidecarC, "ks-http")
	if adminPort == 0 || dep[0].Spec.Template.Metadata.Annotations["prometheus.io/port"] != strconv.Itoa(adminPort) {
		t.Errorf("scrape annotation %q; want the admin port %d", dep[0].Spec.Template.Metadata.Annotations["prometheus.io/port"], adminPort)
	}

	svc := readFileObjects(t, "core-service-patch.yaml")
	if len(svc) != 1 || svc[0].Kind != "Service" || svc[0].Metadata.Name != "bailinghub-core" ||
		len(svc[0].Spec.Ports) != 1 || svc[0].Spec.Ports[0].TargetPort != "ks-http" || httpPort == 0 {
		t.Errorf("core-service-patch.yaml: %+v; want Service bailinghub-core's port re-pointed at ks-http", svc)
	}

	sidecarYAML, err := os.ReadFile(filepath.Join(kustomizeDir, "sidecar.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"listen: \":" + strconv.Itoa(httpPort) + "\"", "admin_listen: \":" + strconv.Itoa(adminPort) + "\""} {
		if !strings.Contains(string(sidecarYAML), want) {
			t.Errorf("sidecar.yaml lacks %q (the container ports)", want)
		}
	}
	cleanEnv(t)
	t.Setenv("KNOWLEDGE_SIDECAR_CORE_TOKEN", "svc_example-service-token-0123456789abcdef")
	t.Setenv("KNOWLEDGE_SIDECAR_CATALOG_DSN", "ro:pw@tcp(db:3306)/bailinghub")
	t.Setenv("KNOWLEDGE_SIDECAR_LEDGER_REDIS_URL", "redis://knowledge-sidecar-redis:6379/0")
	code, stdout, stderr := runCLI("check-config", "--config", filepath.Join(kustomizeDir, "sidecar.yaml"))
	if code != 0 || stdout != "configuration is valid\n" {
		t.Errorf("sidecar.yaml: got exit %d, stdout %q, stderr %q; want valid without warnings", code, stdout, stderr)
	}

	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		t.Log("kubectl not on PATH: the overlay was checked file by file, not built")
		return
	}
	build := func(dir string) []k8sObject {
		t.Helper()
		out, err := exec.Command(kubectl, "kustomize", dir).CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl kustomize %s: %v\n%s", dir, err, out)
		}
		return readObjects(t, out)
	}
	kinds := func(objs []k8sObject) map[string]int {
		m := map[string]int{}
		for _, o := range objs {
			m[o.Kind]++
		}
		return m
	}
	objs := build(kustomizeDir)
	for _, o := range objs {
		switch {
		case o.Kind == "Deployment" && o.Metadata.Name == "bailinghub-core":
			var names []string
			for _, c := range o.Spec.Template.Spec.Containers {
				names = append(names, c.Name)
			}
			slices.Sort(names)
			if !slices.Equal(names, []string{"core", "knowledge-sidecar"}) || len(o.Spec.Template.Spec.InitContainers) != 1 {
				t.Errorf("built Core Deployment: containers %v, %d init containers; want core and knowledge-sidecar, one", names, len(o.Spec.Template.Spec.InitContainers))
			}
		case o.Kind == "Service" && o.Metadata.Name == "bailinghub-core":
			if len(o.Spec.Ports) != 1 || o.Spec.Ports[0].TargetPort != "ks-http" {
				t.Errorf("built Core Service ports %+v; want one, targeting ks-http", o.Spec.Ports)
			}
		}
	}
	if k := kinds(objs); k["PodMonitor"] != 0 || k["Deployment"] != 2 || k["Service"] != 2 || k["ConfigMap"] != 1 || k["Secret"] != 0 {
		t.Errorf("built overlay kinds %v; want 2 Deployments, 2 Services, 1 ConfigMap, no PodMonitor, no Secret", k)
	}
	// With the component (from an overlay of the overlay).
	dir := t.TempDir()
	abs, err := filepath.Abs(kustomizeDir)
	if err != nil {
		t.Fatal(err)
	}
	rel, err := filepath.Rel(dir, abs)
	if err != nil {
		t.Fatal(err)
	}
	kzc := "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n  - " + rel + "\ncomponents:\n  - " + rel + "/podmonitor\n"
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(kzc), 0o600); err != nil {
		t.Fatal(err)
	}
	if k := kinds(build(dir)); k["PodMonitor"] != 1 {
		t.Errorf("with the podmonitor component: kinds %v; want one PodMonitor", k)
	}
}
